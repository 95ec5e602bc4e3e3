import { DEFAULT_IDLER_OPTIONS } from './options.js';

/**
 * The global cap on held TCP clients, shared by every idling socket of one proxy (pass one budget to
 * every {@link Idler} when there are several). A count, not a list: taking and giving back are O(1).
 */
export class IdlerBudget {
  /** The most clients held at once. */
  readonly capacity: number;
  #held = 0;

  /** `capacity` defaults to {@link DEFAULT_IDLER_OPTIONS}.maxHeldTotal (10 000). */
  constructor(capacity: number = DEFAULT_IDLER_OPTIONS.maxHeldTotal) {
    if (!Number.isSafeInteger(capacity) || capacity < 1) {
      throw new RangeError(
        `an IdlerBudget needs a capacity of at least 1, got ${String(capacity)}`,
      );
    }
    this.capacity = capacity;
  }

  /** Clients held now. */
  get held(): number {
    return this.#held;
  }

  /** Takes one slot; false when the budget is spent (the client must not be held). */
  tryAcquire(): boolean {
    if (this.#held >= this.capacity) return false;
    this.#held++;
    return true;
  }

  /** Gives one slot back. */
  release(): void {
    if (this.#held > 0) this.#held--;
  }
}
