import { describe, expect, it } from 'vitest';
import { goTimeString, healthBody, ProxierHealth } from './healthz-state.js';

/** A clock the test moves by hand. */
function fakeClock(start = Date.UTC(2024, 0, 2, 3, 4, 5, 600)) {
  let now = start;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

describe('ProxierHealth', () => {
  const timeout = 60_000; // 2 × the default 30 s sync period

  it('is healthy before the first sync, even with updates queued', () => {
    const clock = fakeClock();
    const health = new ProxierHealth({ healthTimeoutMs: timeout, clock });
    health.queuedUpdate();
    clock.advance(10 * timeout);
    expect(health.status()).toMatchObject({ healthy: true, lastUpdated: undefined });
  });

  it('turns unhealthy once a queued update has waited the health timeout, and healthy after a sync', () => {
    const clock = fakeClock();
    const health = new ProxierHealth({ healthTimeoutMs: timeout, clock });
    health.updated(); // the sync loop started
    clock.advance(1000);
    health.queuedUpdate();
    clock.advance(timeout - 1);
    expect(health.status().healthy).toBe(true);
    clock.advance(1);
    expect(health.status().healthy).toBe(false);
    health.updated();
    expect(health.status()).toMatchObject({ healthy: true, lastUpdated: clock.now() });
  });

  it('measures from the oldest pending update, not the newest', () => {
    const clock = fakeClock();
    const health = new ProxierHealth({ healthTimeoutMs: timeout, clock });
    health.updated();
    health.queuedUpdate();
    clock.advance(timeout / 2);
    health.queuedUpdate();
    clock.advance(timeout / 2);
    expect(health.status().healthy).toBe(false);
  });

  it('stays healthy forever when nothing is queued', () => {
    const clock = fakeClock();
    const health = new ProxierHealth({ healthTimeoutMs: timeout, clock });
    health.updated();
    clock.advance(100 * timeout);
    expect(health.status().healthy).toBe(true);
  });
});

describe('goTimeString', () => {
  it('prints Go time.Time.String() in UTC, with the monotonic reading', () => {
    const t = Date.UTC(2020, 5, 3, 23, 59, 53, 688);
    expect(goTimeString(t)).toBe('2020-06-03 23:59:53.688 +0000 UTC');
    expect(goTimeString(t, t - 202_631)).toBe('2020-06-03 23:59:53.688 +0000 UTC m=+202.631000000');
    expect(goTimeString(Date.UTC(2020, 0, 1, 0, 0, 0, 500))).toBe(
      '2020-01-01 00:00:00.5 +0000 UTC',
    );
    expect(goTimeString(Date.UTC(2020, 0, 1))).toBe('2020-01-01 00:00:00 +0000 UTC');
  });

  it('prints the zero time for "never"', () => {
    expect(goTimeString(undefined, 0)).toBe('0001-01-01 00:00:00 +0000 UTC');
  });
});

describe('healthBody', () => {
  const origin = Date.UTC(2024, 0, 1);
  const now = origin + 1500;

  it('is kube-proxy 1.28’s /healthz body, with lastUpdated rewritten to now when healthy', () => {
    expect(healthBody({ healthy: true, lastUpdated: origin, currentTime: now }, origin, true)).toBe(
      '{"lastUpdated": "2024-01-01 00:00:01.5 +0000 UTC m=+1.500000000","currentTime": "2024-01-01 00:00:01.5 +0000 UTC m=+1.500000000", "nodeEligible": true}',
    );
  });

  it('reports the real lastUpdated when unhealthy, and no nodeEligible for /livez', () => {
    expect(healthBody({ healthy: false, lastUpdated: origin, currentTime: now }, origin)).toBe(
      '{"lastUpdated": "2024-01-01 00:00:00 +0000 UTC m=+0.000000000","currentTime": "2024-01-01 00:00:01.5 +0000 UTC m=+1.500000000"}',
    );
    expect(
      healthBody({ healthy: false, lastUpdated: undefined, currentTime: now }, origin, false),
    ).toContain('"lastUpdated": "0001-01-01 00:00:00 +0000 UTC","currentTime"');
  });
});
