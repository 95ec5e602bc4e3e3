import { getEventListeners } from 'node:events';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { RequestTimeoutError, withRequestTimeout } from './request-timeout.js';
import { realTimers } from './timers.js';

describe('withRequestTimeout', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('settles at its bound even when the request ignores its signal', async () => {
    const outer = new AbortController();
    let inner: AbortSignal | undefined;
    const p = withRequestTimeout(realTimers, 1_000, 'reading', outer.signal, (s) => {
      inner = s;
      return new Promise<never>(() => {});
    });
    const seen = p.catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(999);
    expect(inner?.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    const err = await seen;
    expect(err).toBeInstanceOf(RequestTimeoutError);
    expect((err as RequestTimeoutError).code).toBe('ERR_REQUEST_TIMEOUT');
    expect(inner?.aborted).toBe(true);
    expect(getEventListeners(outer.signal, 'abort').length).toBe(0);
  });

  it("passes the caller's abort on at once and leaves no timer or listener after it settles", async () => {
    const outer = new AbortController();
    const p = withRequestTimeout(realTimers, 1_000, 'reading', outer.signal, () =>
      Promise.resolve(7),
    );
    await expect(p).resolves.toBe(7);
    expect(vi.getTimerCount()).toBe(0);
    expect(getEventListeners(outer.signal, 'abort').length).toBe(0);
    const q = withRequestTimeout(
      realTimers,
      1_000,
      'reading',
      outer.signal,
      () => new Promise(() => {}),
    );
    outer.abort(new Error('caller gone'));
    await expect(q).rejects.toThrow('caller gone');
    expect(vi.getTimerCount()).toBe(0);
  });
});
