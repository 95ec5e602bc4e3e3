/**
 * Ticks per timeout. 16 rather than 8 since members stamp their activity at a tick (`touched`):
 * half a stamp's lateness and half a check's lateness keep expiry within 1.125 timeouts.
 */
const TICKS_PER_TIMEOUT = 16;

/** What a {@link SilenceWheel} watches. */
export interface Silent {
  /**
   * `performance.now()` at the member's last activity, or (for a member that sets {@link touched})
   * at the first tick of a wheel after it. Never earlier than the activity, so never an early expiry.
   */
  lastActive: number;
  /**
   * Set by a member on each activity instead of reading the clock (`performance.now()` costs a few
   * hundred ns, a store next to nothing, and a busy socket is active on every read); a wheel's tick
   * clears it and stamps `lastActive` with the tick's time. Leave it undefined to stamp `lastActive`
   * yourself.
   */
  touched?: boolean;
  /** Called (once) when the member has been silent for the wheel's timeout; it is removed first. */
  expire(wheel: SilenceWheel): void;
}

/**
 * Finds members that have been silent too long without a timer per member: a member marks each
 * activity (one store per read: `touched`, stamped with the time by the next tick), and one interval
 * per timeout length, running only while the wheel has members, checks them every timeout/16. A
 * member expires between 1 and 1.125 timeouts after its last activity (up to 1/16 for the stamp,
 * up to 1/16 for the check). Wheels are shared per timeout length.
 */
export class SilenceWheel {
  static readonly #wheels = new Map<number, SilenceWheel>();
  readonly #timeoutMs: number;
  readonly #members = new Set<Silent>();
  #timer: NodeJS.Timeout | undefined;

  /** The shared wheel for `timeoutMs`. */
  static for(timeoutMs: number): SilenceWheel {
    let wheel = SilenceWheel.#wheels.get(timeoutMs);
    if (wheel === undefined) {
      wheel = new SilenceWheel(timeoutMs);
      SilenceWheel.#wheels.set(timeoutMs, wheel);
    }
    return wheel;
  }

  private constructor(timeoutMs: number) {
    this.#timeoutMs = timeoutMs;
  }

  /**
   * Starts watching `member`, whose silence counts from now (or `now`, a clock read the caller
   * already made): joining is activity. A member that has been quiet for a long time and joins a
   * wheel (a relay that half-closes after a minute of silence) gets the whole timeout, not an
   * expiry at the next tick.
   */
  add(member: Silent, now: number = performance.now()): void {
    member.lastActive = now;
    if (member.touched !== undefined) member.touched = false;
    this.#members.add(member);
    if (this.#timer === undefined) {
      this.#timer = setInterval(this.#tick, Math.max(1, this.#timeoutMs / TICKS_PER_TIMEOUT));
      this.#timer.unref();
    }
  }

  /** Stops watching `member`. */
  delete(member: Silent): void {
    this.#members.delete(member);
  }

  readonly #tick = (): void => {
    const now = performance.now();
    const limit = now - this.#timeoutMs;
    for (const member of this.#members) {
      if (member.touched === true) {
        member.touched = false;
        member.lastActive = now;
      } else if (member.lastActive < limit) {
        this.#members.delete(member);
        member.expire(this);
      }
    }
    if (this.#members.size === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
      SilenceWheel.#wheels.delete(this.#timeoutMs);
    }
  };
}
