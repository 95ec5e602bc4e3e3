/** An {@link SctpTimers} whose clock only moves when the test says so. */
import type { SctpTimers } from '../timers.js';

/** Manual timers plus `advance`. */
export interface ManualTimers extends SctpTimers {
  /** Moves the clock forward, firing due timers in order. */
  advance(ms: number): void;
  readonly pending: number;
}

/** Makes manual timers starting at time 0. */
export function manualTimers(): ManualTimers {
  let now = 0;
  let seq = 0;
  const due = new Map<number, { at: number; fn: () => void }>();
  return {
    now: () => now,
    setTimeout: (fn, ms) => {
      const id = ++seq;
      due.set(id, { at: now + ms, fn });
      return id;
    },
    clearTimeout: (h) => {
      due.delete(h as number);
    },
    advance(ms) {
      const end = now + ms;
      for (;;) {
        let next: [number, { at: number; fn: () => void }] | undefined;
        for (const e of due)
          if (e[1].at <= end && (next === undefined || e[1].at < next[1].at)) next = e;
        if (next === undefined) break;
        due.delete(next[0]);
        now = next[1].at;
        next[1].fn();
      }
      now = end;
    },
    get pending() {
      return due.size;
    },
  };
}
