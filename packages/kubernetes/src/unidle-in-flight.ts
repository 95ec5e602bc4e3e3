/**
 * The unidler's one request in flight per target: every ask for the same target while it runs joins
 * it, and it is aborted when the unidler closes or when every joiner's signal has aborted.
 */
/** How one target's request ended. */
export type Outcome = 'scaled' | 'alreadyScaled' | 'notFound' | 'failed' | 'aborted' | 'skipped';

/** One request in flight for a target; it stops when the unidler closes or every joiner aborted. */
export class InFlight {
  readonly #controller = new AbortController();
  readonly #cleanups: (() => void)[] = [];
  /** Signals already joined: a caller that asks again with the same signal adds no listener. */
  readonly #joined = new WeakSet<AbortSignal>();
  #live = 0;
  #unbounded = false;
  done: Promise<Outcome> = Promise.resolve('aborted');

  constructor(closing: AbortSignal) {
    this.#listen(closing, () => this.#controller.abort());
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Adds a requester; without a signal it keeps the request alive until the unidler closes. */
  join(signal: AbortSignal | undefined): void {
    if (!signal) {
      this.#unbounded = true;
      return;
    }
    if (this.#joined.has(signal)) return;
    this.#joined.add(signal);
    this.#live++;
    this.#listen(signal, () => {
      if (--this.#live === 0 && !this.#unbounded) this.#controller.abort();
    });
  }

  /** Removes every listener this request added. */
  release(): void {
    for (const cleanup of this.#cleanups.splice(0)) cleanup();
  }

  #listen(signal: AbortSignal, onAbort: () => void): void {
    signal.addEventListener('abort', onAbort, { once: true });
    this.#cleanups.push(() => signal.removeEventListener('abort', onAbort));
  }
}
