/**
 * Shared timers for dial attempts. Every attempt has a timeout from a short fixed schedule
 * (250, 500, 1000, 2000 ms by default), and a proxy starts thousands of attempts a second: a
 * `setTimeout` each was a Timeout object to allocate, link into Node's list, unlink on connect and
 * collect, for a timer that almost never fires. Here the attempts of one timeout value started in
 * the same turn of the event loop share one {@link DeadlineBucket} and its one timer.
 *
 * Exactness: Node itself dates every `setTimeout` of one loop iteration from the same cached loop
 * time, so attempts started in the same iteration already shared a start. A bucket closes at the
 * end of the iteration it opened in (a `setImmediate`, one per iteration that starts attempts), so
 * its attempts fire together at the first one's deadline, as their own timers would have within
 * that iteration's processing time. A bucket whose attempts all ended stops its timer.
 */

/** An attempt waiting for its deadline. */
export interface DeadlineWaiter {
  /** The deadline passed (called once; the waiter is out of its bucket by then). */
  deadlinePassed(): void;
}

/** Buckets still taking attempts, by timeout value: closed at the end of this loop iteration. */
const open = new Map<number, DeadlineBucket>();
/** A `setImmediate` to close the open buckets is queued. */
let closing = false;

function closeOpenBuckets(): void {
  closing = false;
  open.clear();
}

/** The attempts of one timeout value started in one loop iteration, and their one timer. */
export class DeadlineBucket {
  readonly #ms: number;
  readonly #waiting = new Set<DeadlineWaiter>();
  #timer: NodeJS.Timeout | undefined;

  private constructor(ms: number) {
    this.#ms = ms;
    this.#timer = setTimeout(this.#fire, ms);
  }

  /**
   * Puts `waiter` in this iteration's bucket for `ms`; returns the bucket, for {@link remove}
   * when the attempt ends before its deadline.
   */
  static add(waiter: DeadlineWaiter, ms: number): DeadlineBucket {
    let bucket = open.get(ms);
    if (bucket === undefined) {
      bucket = new DeadlineBucket(ms);
      open.set(ms, bucket);
      if (!closing) {
        closing = true;
        setImmediate(closeOpenBuckets);
      }
    }
    bucket.#waiting.add(waiter);
    return bucket;
  }

  /** `waiter`'s attempt ended in time; the timer stops with the bucket's last waiter. */
  remove(waiter: DeadlineWaiter): void {
    if (!this.#waiting.delete(waiter) || this.#waiting.size > 0) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (open.get(this.#ms) === this) open.delete(this.#ms);
  }

  readonly #fire = (): void => {
    this.#timer = undefined;
    // Still open (fake timers, or a loop that never reached its check phase): attempts a waiter
    // starts from its callback go to a new bucket, with a timer of their own.
    if (open.get(this.#ms) === this) open.delete(this.#ms);
    const waiting = [...this.#waiting];
    this.#waiting.clear();
    // One throwing waiter must not leave the others waiting for good: its error goes on after.
    let failed = false;
    let first: unknown;
    for (const waiter of waiting) {
      try {
        waiter.deadlinePassed();
      } catch (error) {
        if (!failed) first = error;
        failed = true;
      }
    }
    if (failed) throw first;
  };
}
