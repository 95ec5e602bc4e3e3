/**
 * The clock and timers the engine uses, injected so tests drive retransmission with fake time and
 * production uses the event loop's.
 */

/** An opaque timer handle. */
export type TimerHandle = unknown;

/** What the engine needs from a clock. */
export interface SctpTimers {
  /** Milliseconds on a monotonic clock. */
  now(): number;
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** The event loop's timers and `performance.now()`, resolved at call time so fake timers apply. */
export const defaultTimers: SctpTimers = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

/**
 * One restartable timer (T1-init, T1-cookie, T2-shutdown, T3-rtx, delayed SACK, heartbeat) that
 * re-arms lazily: T3 restarts on every SACK that moves the cumulative ack and the delayed-SACK timer
 * is armed and stopped every other packet, so a platform timer per call (a `setTimeout` plus a
 * `clearTimeout`, each an insertion into Node's timer lists) cost more than the SACK itself. Here
 * `start` only moves a deadline while the platform timer already armed fires no later than it, and
 * `stop` only forgets the deadline; the platform timer, when it fires, re-arms for what is left or
 * does nothing. {@link Timer.cancel} really clears it (the association closing).
 */
export class Timer {
  private handle: TimerHandle | undefined;
  /** When the armed platform timer fires (clock of `timers.now()`). */
  private handleAt = 0;
  /** When the timer is due; -1 when stopped. */
  private deadline = -1;
  private readonly fire = (): void => {
    this.handle = undefined;
    if (this.deadline < 0) return;
    const left = this.deadline - this.timers.now();
    // Platform timers work in whole milliseconds: within one of the deadline counts as due.
    if (left >= 1) {
      this.arm(left);
      return;
    }
    this.deadline = -1;
    this.onFire();
  };

  constructor(
    private readonly timers: SctpTimers,
    private readonly onFire: () => void,
  ) {}

  /** True while armed. */
  get running(): boolean {
    return this.deadline >= 0;
  }

  /** Arms (or re-arms) the timer. */
  start(ms: number): void {
    const at = this.timers.now() + ms;
    this.deadline = at;
    if (this.handle !== undefined) {
      if (this.handleAt <= at) return;
      this.timers.clearTimeout(this.handle);
    }
    this.arm(ms);
  }

  /** Arms the timer only if it is not already running. */
  ensure(ms: number): void {
    if (this.deadline < 0) this.start(ms);
  }

  /** Disarms the timer (the platform timer, if armed, fires later and does nothing). */
  stop(): void {
    this.deadline = -1;
  }

  /** Disarms the timer and clears the platform timer. */
  cancel(): void {
    this.deadline = -1;
    if (this.handle !== undefined) {
      this.timers.clearTimeout(this.handle);
      this.handle = undefined;
    }
  }

  private arm(ms: number): void {
    this.handleAt = this.timers.now() + ms;
    this.handle = this.timers.setTimeout(this.fire, ms);
  }
}
