/**
 * Timing helpers of the default proxy sockets: an exponential back-off for accept failures, a
 * limiter that keeps a flood of identical refusals from flooding the log, and a coarse wheel that
 * finds silent connections without a timer per connection.
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

/** What a {@link SilenceWheel} watches. */
export interface Silent {
  /** `performance.now()` at the member's last activity. */
  readonly lastActive: number;
  /** Called (once) when the member has been silent for the wheel's timeout; it is removed first. */
  expire(wheel: SilenceWheel): void;
}

/**
 * Finds members that have been silent too long without a timer per member: a member records the
 * time of its last activity (one store per read), and one interval per timeout length, running only
 * while the wheel has members, checks them every timeout/8. A member expires between 1 and 1.125
 * timeouts after its last activity. Wheels are shared per timeout length.
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

  /** Starts watching `member`. */
  add(member: Silent): void {
    this.#members.add(member);
    if (this.#timer === undefined) {
      this.#timer = setInterval(this.#tick, Math.max(1, this.#timeoutMs / 8));
      this.#timer.unref();
    }
  }

  /** Stops watching `member`. */
  delete(member: Silent): void {
    this.#members.delete(member);
  }

  readonly #tick = (): void => {
    const limit = performance.now() - this.#timeoutMs;
    for (const member of this.#members) {
      if (member.lastActive < limit) {
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
