import { describe, expect, it } from 'vitest';
import { LogLimiter } from './log-limiter.js';

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
