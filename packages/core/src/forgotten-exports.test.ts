import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { findForgottenExports, REPO_ROOT } from './test-support/forgotten-exports.js';

/**
 * Deliberately unexported types that exported declarations mention, each with the reason a user
 * never needs to spell it. Anything else a public signature mentions must be importable from the
 * package (a user implementing an interface or building an options object would otherwise copy the
 * type or reach into dist/).
 */
const ALLOWED: Record<string, string> = {
  ConfigFanout:
    'the shared base of ServiceConfig, EndpointsConfig and EndpointSliceConfig; users name those three',
};

describe('every type a public declaration mentions can be imported', () => {
  it('in every package', () => {
    const packages = readdirSync(join(REPO_ROOT, 'packages'), { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => join(REPO_ROOT, 'packages', entry.name));
    const forgotten = findForgottenExports(REPO_ROOT, packages)
      .filter((f) => ALLOWED[f.name] === undefined)
      .map((f) => `${f.specifier}: ${f.name} (${f.declaredIn}), mentioned by ${f.exportedAs}`);
    expect(forgotten).toEqual([]);
  }, 120_000);
});
