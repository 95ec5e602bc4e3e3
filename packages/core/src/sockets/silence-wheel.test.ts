import { afterEach, describe, expect, it, vi } from 'vitest';
import { SilenceWheel, type Silent } from './silence-wheel.js';

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

describe('SilenceWheel with touched members', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('stamps a touched member at the next tick and still expires it within 1 to 1.125 timeouts', () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'performance'] });
    const expire = vi.fn();
    const wheel = SilenceWheel.for(1600);
    const m: Silent & { lastActive: number; touched: boolean } = {
      lastActive: performance.now(),
      touched: false,
      expire,
    };
    wheel.add(m);
    vi.advanceTimersByTime(1000);
    m.touched = true; // activity at 1000 ms, between ticks
    vi.advanceTimersByTime(1599); // 1599 ms after the activity: never early
    expect(expire).not.toHaveBeenCalled();
    expect(m.touched).toBe(false);
    vi.advanceTimersByTime(1000 + 1800 - 2599); // 1.125 timeouts after the activity
    expect(expire).toHaveBeenCalledTimes(1);
  });
});
