/**
 * Exponential back-off with jitter, as client-go's reflector uses between failed list/watch attempts:
 * a proxy on every node of a large cluster must not hammer a recovering API server in lock-step.
 */

/** Back-off settings; every field has a default. */
export interface BackoffOptions {
  /** The first delay. Default 800 (client-go's reflector). */
  initialMs?: number;
  /** The ceiling. Default 30 000. */
  maxMs?: number;
  /** Growth per failure. Default 2. */
  factor?: number;
  /** Up to this fraction of the delay is added at random. Default 1 (up to double). */
  jitter?: number;
  /** A run of success this long forgets earlier failures. Default 120 000. */
  resetAfterMs?: number;
}

/** The defaults of {@link BackoffOptions}. */
export const DEFAULT_BACKOFF: Required<BackoffOptions> = {
  initialMs: 800,
  maxMs: 30_000,
  factor: 2,
  jitter: 1,
  resetAfterMs: 120_000,
};

/** Computes successive delays; `success()` and time since the last failure bring it back down. */
export class Backoff {
  readonly #opts: Required<BackoffOptions>;
  readonly #now: () => number;
  readonly #random: () => number;
  #failures = 0;
  #lastFailureAt = Number.NEGATIVE_INFINITY;

  constructor(opts: BackoffOptions = {}, now: () => number = Date.now, random = Math.random) {
    this.#opts = { ...DEFAULT_BACKOFF, ...opts };
    this.#now = now;
    this.#random = random;
  }

  /** Records a failure and returns how long to wait before the next attempt. */
  next(): number {
    const now = this.#now();
    if (now - this.#lastFailureAt >= this.#opts.resetAfterMs) this.#failures = 0;
    this.#lastFailureAt = now;
    const { initialMs, maxMs, factor, jitter } = this.#opts;
    const base = Math.min(maxMs, initialMs * factor ** this.#failures);
    this.#failures++;
    return Math.min(maxMs, Math.round(base * (1 + jitter * this.#random())));
  }

  /** Forgets earlier failures: the next one waits `initialMs` again. */
  success(): void {
    this.#failures = 0;
  }

  /** Failures since the last reset, for logs. */
  get failures(): number {
    return this.#failures;
  }
}
