/**
 * A token bucket: `burst` tokens, refilled at `perSecond`. The event correlator keeps one per
 * involved object, so one noisy object is limited without silencing the others.
 */
export class TokenBucket {
  readonly #burst: number;
  readonly #perMs: number;
  #tokens: number;
  #last: number;

  constructor(burst: number, perSecond: number, now: number) {
    this.#burst = burst;
    this.#perMs = perSecond / 1000;
    this.#tokens = burst;
    this.#last = now;
  }

  /** Takes one token if there is one. */
  tryTake(now: number): boolean {
    if (now > this.#last) {
      this.#tokens = Math.min(this.#burst, this.#tokens + (now - this.#last) * this.#perMs);
      this.#last = now;
    }
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }
}
