import { describe, expect, it } from 'vitest';
import { StaticInformer } from '../config/informer-static.js';
import { InvalidObjectError } from '../errors.js';
import { published, service, useProxierHarness } from '../test-support/proxier-harness.js';
import { spyLogger } from '../test-support/spy-logger.js';
import { LOG_MESSAGE_MAX_CHARS } from './log-safe.js';
import type { Service } from './model.js';
import { reportInvalidObject, validateService } from './validation.js';

const start = useProxierHarness();

/** Every character a log line must never carry raw: C0 (but none here is printable), DEL, C1. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: that is what is looked for.
const RAW_CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e]/;

const MEGABYTE = 1024 * 1024;
const HOSTILE = `evil\x1b[2J\r\nFAKE LOG LINE\x00${'x'.repeat(MEGABYTE)}`;

/** The text of every warning a spy logger received. */
function warnings(log: ReturnType<typeof spyLogger>): string[] {
  return log.warn.mock.calls.map((call) => String(call[0]));
}

describe('invalid-object reports are log-safe', () => {
  it('escapes and truncates a megabyte name with ESC, CR and NUL in one warning', () => {
    const log = spyLogger();
    const result = validateService({
      metadata: { namespace: 'ns', name: HOSTILE },
      spec: { clusterIP: '10.0.0.1', ports: [{ port: 80 }] },
    });
    expect(result.ok).toBe(false);
    if (result.ok) return;
    reportInvalidObject(log, result.error);
    const lines = warnings(log);
    expect(lines).toHaveLength(1);
    const line = lines[0] as string;
    expect(line).not.toMatch(RAW_CONTROL);
    expect(line.length).toBeLessThan(2 * LOG_MESSAGE_MAX_CHARS);
    expect(line).toContain('\\x1b[2J\\r\\nFAKE LOG LINE\\x00');
    expect(line).toMatch(/more\)/);
  });

  it('makes kind, key and reason safe even when an integrator built the error', () => {
    const log = spyLogger();
    const before = published.rejected.length;
    reportInvalidObject(log, new InvalidObjectError(HOSTILE, HOSTILE, HOSTILE));
    const lines = warnings(log);
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toMatch(RAW_CONTROL);
    expect((lines[0] as string).length).toBeLessThan(2 * LOG_MESSAGE_MAX_CHARS);
    const message = published.rejected[before];
    expect(message).toBeDefined();
    for (const field of [message?.kind, message?.key, message?.reason]) {
      expect(field).not.toMatch(RAW_CONTROL);
      expect((field as string).length).toBeLessThan(2 * LOG_MESSAGE_MAX_CHARS);
    }
  });

  it('quotes a hostile value safely in the reason (the value, not just the name)', () => {
    const log = spyLogger();
    const result = validateService({
      metadata: { namespace: 'ns', name: 'ok' },
      spec: { clusterIP: '10.0.0.1', type: HOSTILE, ports: [{ port: 80 }] },
    });
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error.reason).not.toMatch(RAW_CONTROL);
    expect(result.error.reason).toContain('spec.type');
    reportInvalidObject(log, result.error);
    expect(warnings(log)).toHaveLength(1);
  });

  it('gives one warning per bad Service through the Proxier', async () => {
    const logger = spyLogger();
    const h = await start({ logger });
    const bad: Service = service('a', { type: HOSTILE as 'ClusterIP' });
    bad.metadata.name = HOSTILE;
    h.proxier.onServiceAdd(bad);
    const lines = warnings(logger).filter((l) => l.includes('ignoring Service'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toMatch(RAW_CONTROL);
    expect((lines[0] as string).length).toBeLessThan(2 * LOG_MESSAGE_MAX_CHARS);
  });

  it('escapes a duplicate key a static informer warns about', () => {
    const log = spyLogger();
    const informer = new StaticInformer<Service>({ kind: 'Service', logger: log });
    const svc = { metadata: { namespace: 'ns', name: `a\x1bb${'y'.repeat(MEGABYTE)}` }, spec: {} };
    informer.replace([svc as Service, svc as Service]);
    const lines = warnings(log).filter((l) => l.includes('listed twice'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toMatch(RAW_CONTROL);
    expect((lines[0] as string).length).toBeLessThan(LOG_MESSAGE_MAX_CHARS);
  });
});
