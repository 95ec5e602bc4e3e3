import { describe, expect, it } from 'vitest';
import { defaultConfiguration } from './config-schema.js';
import { toInternalConfiguration } from './configz.js';

/** Fields of the extension block that the file writes as Go durations ("2m0s"), by their names. */
const DURATION_NAME = /(Timeouts?|Deadline|KeepAlive|Period)$/;

describe('/configz', () => {
  it('prints every duration of the extension block as a Go duration, not as milliseconds', () => {
    const config = defaultConfiguration();
    const internal = toInternalConfiguration(config) as {
      UserspaceProxy: Record<string, unknown>;
    };
    const printed = internal.UserspaceProxy;
    const walk = (block: Record<string, unknown>, out: Record<string, unknown>, path: string) => {
      for (const [key, value] of Object.entries(block)) {
        // Go names differ in initialisms (tcpIdleTimeout is TCPIdleTimeout): match ignoring case.
        const name = Object.keys(out).find((k) => k.toLowerCase() === key.toLowerCase());
        const shown = name === undefined ? undefined : out[name];
        if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
          walk(
            value as Record<string, unknown>,
            shown as Record<string, unknown>,
            `${path}.${key}`,
          );
        } else if (DURATION_NAME.test(key)) {
          const ok = Array.isArray(shown)
            ? shown.every((v) => typeof v === 'string')
            : typeof shown === 'string';
          expect(ok, `${path}.${key} shown as ${JSON.stringify(shown)}`).toBe(true);
        }
      }
    };
    walk(config.userspaceProxy as unknown as Record<string, unknown>, printed, 'userspaceProxy');
    expect(printed.IdlingHoldTimeout).toBe('2m0s');
  });
});
