/**
 * The back-off of a listener whose accept failed: the default TCP socket pauses accepting instead
 * of spinning or crashing, and a socket author's own listener can do the same.
 */

/** The longest pause between two attempts to accept again, whatever the base delay. */
export const MAX_ACCEPT_BACKOFF_MS = 1000;

/**
 * Doubling back-off for a listener whose accept failed (EMFILE and friends). The reference
 * panicked the whole process instead (quirk 12); pausing lets established connections, which are
 * what frees descriptors, go on while new ones are refused for a bounded time.
 */
export class AcceptBackoff {
  readonly #baseMs: number;
  readonly #maxMs: number;
  #nextMs: number;

  /**
   * @param baseMs the first pause; 0 or less is treated as 1 ms so the loop can never spin.
   * @param maxMs the cap ({@link MAX_ACCEPT_BACKOFF_MS} by default).
   */
  constructor(baseMs: number, maxMs = MAX_ACCEPT_BACKOFF_MS) {
    this.#baseMs = Math.max(1, baseMs);
    this.#maxMs = Math.max(this.#baseMs, maxMs);
    this.#nextMs = this.#baseMs;
  }

  /** The pause to take now; each call doubles the following one up to the cap. */
  next(): number {
    const delay = this.#nextMs;
    this.#nextMs = Math.min(this.#maxMs, delay * 2);
    return delay;
  }

  /** Back to the base delay, once accepting has worked again. */
  reset(): void {
    this.#nextMs = this.#baseMs;
  }
}
