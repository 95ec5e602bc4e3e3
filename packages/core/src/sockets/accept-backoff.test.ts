import { describe, expect, it } from 'vitest';
import { AcceptBackoff, MAX_ACCEPT_BACKOFF_MS } from './accept-backoff.js';

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
