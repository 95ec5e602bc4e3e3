/**
 * Lets one message through per interval and counts the ones it held back, so a refusal that repeats
 * for every datagram (a full session table, a Service with no endpoints) costs one log line per
 * interval instead of one per packet. The clock is injected for tests.
 */
export class LogLimiter {
  readonly #intervalMs: number;
  readonly #now: () => number;
  #last = Number.NEGATIVE_INFINITY;
  #suppressed = 0;

  /**
   * @param intervalMs the shortest time between two messages (default 10 s).
   * @param now the clock (default Date.now, which vitest fake timers also control).
   */
  constructor(intervalMs = 10_000, now: () => number = Date.now) {
    this.#intervalMs = intervalMs;
    this.#now = now;
  }

  /**
   * Returns -1 when the caller must stay quiet, otherwise the number of messages suppressed since
   * the last one it let through (which the caller should mention).
   */
  take(): number {
    const now = this.#now();
    if (now - this.#last < this.#intervalMs) {
      this.#suppressed++;
      return -1;
    }
    this.#last = now;
    const suppressed = this.#suppressed;
    this.#suppressed = 0;
    return suppressed;
  }
}
