import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  AcceptBackoff,
  LogLimiter,
  MAX_ACCEPT_BACKOFF_MS,
  SilenceWheel,
  type Silent,
} from './accept-backoff.js';

describe('AcceptBackoff', () => {
  it('doubles from the base up to 1 s and starts over after a reset', () => {
    const backoff = new AcceptBackoff(50);
    expect([1, 2, 3, 4, 5, 6, 7].map(() => backoff.next())).toEqual([
      50, 100, 200, 400, 800, 1000, 1000,
    ]);
    backoff.reset();
    expect(backoff.next()).toBe(50);
    expect(MAX_ACCEPT_BACKOFF_MS).toBe(1000);
  });

  it('never returns 0, so a failing listener cannot spin', () => {
    const backoff = new AcceptBackoff(0);
    expect(backoff.next()).toBe(1);
    expect(backoff.next()).toBe(2);
  });
});

describe('LogLimiter', () => {
  it('lets one message through per interval and counts the suppressed ones', () => {
    let now = 1_000;
    const limiter = new LogLimiter(10_000, () => now);
    expect(limiter.take()).toBe(0);
    expect(limiter.take()).toBe(-1);
    now += 5_000;
    expect(limiter.take()).toBe(-1);
    now += 5_000;
    expect(limiter.take()).toBe(2);
    expect(limiter.take()).toBe(-1);
  });
});

describe('SilenceWheel', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('expires a member between 1 and 1.125 timeouts after its last activity', () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'performance'] });
    const expired: string[] = [];
    const member = (name: string): Silent & { lastActive: number } => ({
      lastActive: performance.now(),
      expire(wheel) {
        expect(wheel).toBe(SilenceWheel.for(800));
        expired.push(name);
      },
    });
    const quiet = member('quiet');
    const busy = member('busy');
    const wheel = SilenceWheel.for(800);
    wheel.add(quiet);
    wheel.add(busy);
    vi.advanceTimersByTime(700);
    busy.lastActive = performance.now();
    vi.advanceTimersByTime(100);
    expect(expired).toEqual([]);
    vi.advanceTimersByTime(100);
    expect(expired).toEqual(['quiet']);
    vi.advanceTimersByTime(600); // busy silent for 800 ms: not more than the timeout yet
    expect(expired).toEqual(['quiet']);
    vi.advanceTimersByTime(100);
    expect(expired).toEqual(['quiet', 'busy']);
    vi.advanceTimersByTime(10_000);
    expect(expired).toEqual(['quiet', 'busy']);
  });

  it('forgets a deleted member', () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'performance'] });
    const expire = vi.fn();
    const wheel = SilenceWheel.for(100);
    const m = { lastActive: performance.now(), expire };
    wheel.add(m);
    wheel.delete(m);
    vi.advanceTimersByTime(1_000);
    expect(expire).not.toHaveBeenCalled();
  });
});
