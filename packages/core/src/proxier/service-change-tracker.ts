import { isDeepStrictEqual } from 'node:util';
import type { Service } from '../model/model.js';

/** What a sync has to apply for one Service: the state last applied, and the state wanted now. */
export interface ServiceChange {
  /** The Service as it was before the first change not yet applied; null when it did not exist. */
  readonly previous: Service | null;
  /** The Service as it is now; null when it has been deleted. */
  current: Service | null;
}

/**
 * Collapses Service events into at most one pending change per Service until a sync takes them.
 * Following the reference's table: the oldest `previous` is kept (it is what was last applied, and
 * what unmerging must compare against), the newest `current` wins, and a change whose two ends are
 * deep-equal is dropped, so add→delete, or a resync update with an unchanged object, costs a sync
 * nothing. Recording is O(size of the object) at worst and O(1) when old and new are one object.
 */
export class ServiceChangeTracker {
  #pending = new Map<string, ServiceChange>();

  /**
   * Records one event for `key` (add: previous null; delete: current null). Returns true when a
   * change is pending for the key afterwards, false when it collapsed to nothing.
   */
  update(key: string, previous: Service | null, current: Service | null): boolean {
    let change = this.#pending.get(key);
    if (change === undefined) {
      // A resync delivers the very same object twice: nothing to allocate or compare.
      if (previous === current) return false;
      change = { previous, current };
      this.#pending.set(key, change);
    }
    change.current = current;
    if (change.previous === current || isDeepStrictEqual(change.previous, current)) {
      this.#pending.delete(key);
      return false;
    }
    return true;
  }

  /** Takes every pending change at once, leaving none: what a sync does at its start. */
  take(): Map<string, ServiceChange> {
    const taken = this.#pending;
    this.#pending = new Map();
    return taken;
  }

  /** The pending change of one Service, for inspection and tests. */
  get(key: string): ServiceChange | undefined {
    return this.#pending.get(key);
  }

  /** How many Services have a pending change. */
  get size(): number {
    return this.#pending.size;
  }
}
