import { describe, expect, it } from 'vitest';
import { parseWorkers } from '../cli-flags.js';
import { defaultConfiguration } from '../config-schema.js';
import { restartDelay, WORKER_RESTART_MAX_MS } from './pool.js';
import { MAX_AUTO_WORKERS, resolveWorkerCount } from './worker-count.js';

const config = (workers: number | 'auto', mode = 'service-port-portal') => {
  const c = defaultConfiguration();
  return { ...c, mode, userspaceProxy: { ...c.userspaceProxy, workers } };
};

describe('resolveWorkerCount', () => {
  it('defaults to one process', () => {
    expect(defaultConfiguration().userspaceProxy.workers).toBe(1);
    expect(resolveWorkerCount(defaultConfiguration())).toEqual({ count: 1 });
  });
  it('auto is the cores, capped', () => {
    expect(resolveWorkerCount(config('auto'), () => 2)).toEqual({ count: 2 });
    expect(resolveWorkerCount(config('auto'), () => 96).count).toBe(MAX_AUTO_WORKERS);
  });
  it('redirect mode serves with one worker and says why', () => {
    const r = resolveWorkerCount(config(4, 'userspace'));
    expect(r.count).toBe(1);
    expect(r.reason).toMatch(/redirect mode/);
  });
  it('parses the flag', () => {
    expect(parseWorkers('auto')).toBe('auto');
    expect(parseWorkers('3')).toBe(3);
    expect(() => parseWorkers('0')).toThrow(/from 1 to/);
    expect(() => parseWorkers('two')).toThrow(/from 1 to/);
  });
});

describe('restartDelay', () => {
  it('starts at 500 ms, doubles per early death, and stops at 30 s', () => {
    expect([0, 1, 2, 3].map(restartDelay)).toEqual([500, 500, 1000, 2000]);
    expect(restartDelay(40)).toBe(WORKER_RESTART_MAX_MS);
  });
});
