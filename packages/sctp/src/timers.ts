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
 * One restartable timer (T1-init, T1-cookie, T2-shutdown, T3-rtx, delayed SACK). Allocation-free
 * on restart apart from the platform timer itself.
 */
export class Timer {
  private handle: TimerHandle | undefined;
  private readonly fire = (): void => {
    this.handle = undefined;
    this.onFire();
  };

  constructor(
    private readonly timers: SctpTimers,
    private readonly onFire: () => void,
  ) {}

  /** True while armed. */
  get running(): boolean {
    return this.handle !== undefined;
  }

  /** Arms (or re-arms) the timer. */
  start(ms: number): void {
    if (this.handle !== undefined) this.timers.clearTimeout(this.handle);
    this.handle = this.timers.setTimeout(this.fire, ms);
  }

  /** Arms the timer only if it is not already running. */
  ensure(ms: number): void {
    if (this.handle === undefined) this.handle = this.timers.setTimeout(this.fire, ms);
  }

  /** Disarms the timer. */
  stop(): void {
    if (this.handle !== undefined) {
      this.timers.clearTimeout(this.handle);
      this.handle = undefined;
    }
  }
}
