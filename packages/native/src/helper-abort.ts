/** The engine's abort signal: it ends every dial in flight when the helper dies. */

/**
 * What core's dial schedule uses of an `AbortSignal` (`aborted`, `reason`, adding and removing one
 * 'abort' listener), with a Set of listeners: every dial in flight listens on the engine's signal,
 * and Node's `EventTarget` walks its whole listener list on each add (a 10 000-client hand-over
 * spent 155 ms of its Node CPU there, with 256 dials in flight).
 */
export class HelperAbort {
  aborted = false;
  reason: unknown;
  readonly #listeners = new Set<() => void>();

  addEventListener(_type: 'abort', listener: () => void): void {
    if (!this.aborted) this.#listeners.add(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    this.#listeners.delete(listener);
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = [...this.#listeners];
    this.#listeners.clear();
    for (const listener of listeners) listener();
  }
}
