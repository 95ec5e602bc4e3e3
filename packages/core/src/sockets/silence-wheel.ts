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
