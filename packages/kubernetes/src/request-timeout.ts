import { ProxyError } from '@userspace-proxy/core';
import type { Timers } from './timers.js';

/**
 * One API request that did not answer within its time. The unidler treats it like a request that
 * failed on the network: it retries with back-off up to its attempts and then gives up, so a server
 * that accepts a connection and never answers cannot hold a target's one request slot for ever.
 */
export class RequestTimeoutError extends ProxyError {
  /** The bound that was reached, in milliseconds. */
  readonly timeoutMs: number;

  constructor(what: string, timeoutMs: number) {
    super('ERR_REQUEST_TIMEOUT', `${what}: no answer within ${timeoutMs} ms`);
    this.timeoutMs = timeoutMs;
  }
}

/**
 * Runs `fn` with a signal that aborts when `signal` does or after `timeoutMs`, and settles by then
 * even if `fn` ignores its signal (a client library that does not pass it on must not hang the
 * caller). Every timer and listener it adds is removed when it settles.
 */
export function withRequestTimeout<T>(
  timers: Timers,
  timeoutMs: number,
  what: string,
  signal: AbortSignal,
  fn: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const controller = new AbortController();
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      timers.clearTimeout(timer);
      controller.abort(signal.reason);
      reject(signal.reason);
    };
    const timer = timers.setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      const error = new RequestTimeoutError(what, timeoutMs);
      controller.abort(error);
      reject(error);
    }, timeoutMs);
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    const settle = () => {
      timers.clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    };
    fn(controller.signal).then(
      (value) => {
        settle();
        resolve(value);
      },
      (err: unknown) => {
        settle();
        reject(err);
      },
    );
  });
}
