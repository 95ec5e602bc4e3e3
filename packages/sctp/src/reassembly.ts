/**
 * The receive side of an association: which TSNs arrived (cumulative point, out-of-order set,
 * duplicates) for the SACK, reassembly of fragments into messages, and per-stream SSN order.
 * Everything held is bounded in bytes and entries; a chunk that would exceed a bound is dropped
 * (not acknowledged), so the sender retransmits it later instead of the receiver growing.
 */
import { type DataChunk, DataFlags } from './chunk-types.js';
import { tsnAdd, tsnDiff, tsnLt, tsnLte } from './serial.js';

/** A whole message handed to the user: boundaries, stream, PPID and the U bit kept. */
export interface InboundMessage {
  readonly streamId: number;
  readonly ppid: number;
  readonly unordered: boolean;
  readonly data: Buffer;
}

/** Bounds of one receiver. */
export interface ReceiverLimits {
  /** Largest message it reassembles; a bigger one aborts the association. */
  readonly maxMessageBytes: number;
  /** Bytes it may hold (fragments, out-of-order messages, undelivered messages). */
  readonly maxHeldBytes: number;
  /** Most TSNs it keeps above the cumulative point. */
  readonly maxOutOfOrder: number;
}

/** What happened to one DATA chunk. */
export type ReceiveResult = 'new' | 'duplicate' | 'dropped' | 'invalid-stream' | 'too-big';

interface Fragment {
  readonly flags: number;
  readonly streamId: number;
  readonly ssn: number;
  readonly ppid: number;
  readonly data: Buffer;
}

interface StreamState {
  nextSsn: number;
  readonly waiting: Map<number, InboundMessage>;
}

/**
 * Bytes charged per held fragment or waiting message on top of its data, so a flood of one-byte
 * chunks is bounded in entries (and real memory) too, not only in payload bytes.
 */
export const ENTRY_OVERHEAD = 64;

/** Most gap blocks one SACK reports (they are offsets; more would not fit one packet safely). */
export const MAX_GAP_BLOCKS = 128;
/** Most runs of out-of-order TSNs held (each a hole the peer must fill); more are dropped. */
export const MAX_RUNS = 1024;
/** Most duplicate TSNs one SACK reports. */
export const MAX_DUP_REPORTS = 16;

/** See the module comment. `deliver` is called synchronously, in order, with complete messages. */
export class Receiver {
  /** The highest TSN below which everything arrived. */
  cumTsn: number;
  /** The highest TSN seen. */
  highestTsn: number;
  /** Bytes held in fragments and in ordered messages waiting for an earlier SSN. */
  heldBytes = 0;
  /**
   * TSNs received above the cumulative point, as runs: flat [start, end, start, end, ...] pairs in
   * TSN order, never adjacent. Runs, not single TSNs, so a SACK's gap blocks and every lookup cost
   * O(runs), not O(TSNs held).
   */
  private readonly runs: number[] = [];
  private outOfOrderCount = 0;
  private readonly fragments = new Map<number, Fragment>();
  private readonly streams = new Map<number, StreamState>();
  private dups: number[] = [];

  constructor(
    peerInitialTsn: number,
    private readonly inboundStreams: number,
    private readonly limits: ReceiverLimits,
    private readonly deliver: (m: InboundMessage) => void,
  ) {
    this.cumTsn = tsnAdd(peerInitialTsn, -1);
    this.highestTsn = this.cumTsn;
  }

  /** True when a TSN above the cumulative point is missing (the SACK must go out at once). */
  get hasGaps(): boolean {
    return this.runs.length > 0;
  }

  /** True when duplicates wait to be reported. */
  get hasDuplicates(): boolean {
    return this.dups.length > 0;
  }

  /**
   * Takes one DATA chunk. `windowClosed` says the advertised window is zero: new TSNs beyond the
   * highest seen are then dropped (RFC 9260 §6.2). `queuedBytes` counts delivered-but-unread bytes.
   */
  receive(c: DataChunk, windowClosed: boolean, queuedBytes: number): ReceiveResult {
    const tsn = c.tsn;
    if (tsnLte(tsn, this.cumTsn) || this.isOutOfOrder(tsn)) {
      if (this.dups.length < MAX_DUP_REPORTS) this.dups.push(tsn);
      return 'duplicate';
    }
    const ahead = tsnDiff(this.cumTsn, tsn);
    if (
      ahead !== 1 &&
      (ahead > this.limits.maxOutOfOrder + 1 ||
        this.outOfOrderCount >= this.limits.maxOutOfOrder ||
        this.runs.length >= 2 * MAX_RUNS)
    )
      return 'dropped';
    if (windowClosed && !tsnLte(tsn, this.highestTsn)) return 'dropped';
    const whole =
      (c.flags & (DataFlags.BEGIN | DataFlags.END)) === (DataFlags.BEGIN | DataFlags.END);
    const max = this.limits.maxHeldBytes;
    if (
      this.heldBytes + queuedBytes + c.data.length + ENTRY_OVERHEAD > max &&
      // A whole message deliverable now is not held: take it while the user's queue has room, so
      // the one TSN that would release the held messages is never refused because of them.
      !(whole && queuedBytes + c.data.length <= max && this.deliverableNow(c))
    ) {
      // Nothing can free memory if the next expected TSN does not fit and nothing waits for the
      // user: the message in progress is larger than this receiver can hold, or what is held
      // (fragments that never complete, SSNs skipped) never will be delivered. Dropping it would
      // stall the association for good, so it ends (Out of Resource).
      return ahead === 1 && queuedBytes === 0 ? 'too-big' : 'dropped';
    }
    const filledHole = tsnLt(tsn, this.highestTsn);
    this.markReceived(tsn, ahead);
    if (c.streamId >= this.inboundStreams) return 'invalid-stream';
    if (whole) {
      this.complete(
        {
          streamId: c.streamId,
          ppid: c.ppid,
          unordered: (c.flags & DataFlags.UNORDERED) !== 0,
          data: c.data,
        },
        c.ssn,
      );
      return 'new';
    }
    this.fragments.set(tsn, c);
    this.heldBytes += c.data.length + ENTRY_OVERHEAD;
    // A fragment arriving in order completes nothing unless it is the last one: walking the
    // message only then keeps reassembly O(fragments), not O(fragments²) (or worse, for a peer
    // that sends endless middle fragments).
    if ((c.flags & DataFlags.END) === 0 && !filledHole) return 'new';
    return this.assemble(tsn, c);
  }

  /** True when a whole message would be delivered at once (unordered, or its stream's next SSN). */
  private deliverableNow(c: DataChunk): boolean {
    if ((c.flags & DataFlags.UNORDERED) !== 0) return true;
    return (this.streams.get(c.streamId)?.nextSsn ?? 0) === c.ssn;
  }

  /** Index (of the pair) of the first run whose start is above `d` (offsets from the cumulative point). */
  private runAfter(d: number): number {
    const r = this.runs;
    let lo = 0;
    let hi = r.length >>> 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (tsnDiff(this.cumTsn, r[2 * mid] as number) <= d) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private isOutOfOrder(tsn: number): boolean {
    const d = tsnDiff(this.cumTsn, tsn);
    const k = this.runAfter(d) - 1;
    return k >= 0 && tsnDiff(this.cumTsn, this.runs[2 * k + 1] as number) >= d;
  }

  private markReceived(tsn: number, ahead: number): void {
    if (!tsnLte(tsn, this.highestTsn)) this.highestTsn = tsn;
    const r = this.runs;
    if (ahead !== 1) {
      this.outOfOrderCount++;
      const k = this.runAfter(ahead);
      const joinPrev = k > 0 && tsnDiff(this.cumTsn, r[2 * k - 1] as number) + 1 === ahead;
      const joinNext = 2 * k < r.length && tsnDiff(this.cumTsn, r[2 * k] as number) === ahead + 1;
      if (joinPrev && joinNext) {
        r[2 * k - 1] = r[2 * k + 1] as number;
        r.splice(2 * k, 2);
      } else if (joinPrev) {
        r[2 * k - 1] = tsn;
      } else if (joinNext) {
        r[2 * k] = tsn;
      } else {
        r.splice(2 * k, 0, tsn, tsn);
      }
      return;
    }
    this.cumTsn = tsn;
    if (r.length > 0 && r[0] === tsnAdd(tsn, 1)) {
      this.outOfOrderCount -= tsnDiff(r[0] as number, r[1] as number) + 1;
      this.cumTsn = r[1] as number;
      r.splice(0, 2);
    }
  }

  private assemble(tsn: number, c: Fragment): ReceiveResult {
    const frags = this.fragments;
    const unordered = c.flags & DataFlags.UNORDERED;
    const same = (f: Fragment): boolean =>
      f.streamId === c.streamId &&
      (f.flags & DataFlags.UNORDERED) === unordered &&
      (unordered !== 0 || f.ssn === c.ssn);
    let last = tsn;
    let cur = c;
    let bytes = c.data.length;
    while ((cur.flags & DataFlags.END) === 0) {
      const next = frags.get(tsnAdd(last, 1));
      if (next === undefined || (next.flags & DataFlags.BEGIN) !== 0 || !same(next)) return 'new';
      last = tsnAdd(last, 1);
      cur = next;
      bytes += next.data.length;
    }
    let first = tsn;
    cur = c;
    while ((cur.flags & DataFlags.BEGIN) === 0) {
      const prev = frags.get(tsnAdd(first, -1));
      if (prev === undefined || (prev.flags & DataFlags.END) !== 0 || !same(prev)) return 'new';
      first = tsnAdd(first, -1);
      cur = prev;
      bytes += prev.data.length;
    }
    if (bytes > this.limits.maxMessageBytes) return 'too-big';
    const parts: Buffer[] = [];
    for (let t = first; ; t = tsnAdd(t, 1)) {
      const f = frags.get(t) as Fragment;
      frags.delete(t);
      parts.push(f.data);
      if (t === last) break;
    }
    this.heldBytes -= bytes + parts.length * ENTRY_OVERHEAD;
    this.complete(
      {
        streamId: c.streamId,
        ppid: c.ppid,
        unordered: unordered !== 0,
        data: Buffer.concat(parts, bytes),
      },
      c.ssn,
    );
    return 'new';
  }

  private complete(m: InboundMessage, ssn: number): void {
    if (m.unordered) {
      this.deliver(m);
      return;
    }
    let s = this.streams.get(m.streamId);
    if (s === undefined) {
      s = { nextSsn: 0, waiting: new Map() };
      this.streams.set(m.streamId, s);
    }
    if (ssn !== s.nextSsn) {
      if (!s.waiting.has(ssn)) {
        s.waiting.set(ssn, m);
        this.heldBytes += m.data.length + ENTRY_OVERHEAD;
      }
      return;
    }
    this.deliver(m);
    s.nextSsn = (s.nextSsn + 1) & 0xffff;
    for (let w = s.waiting.get(s.nextSsn); w !== undefined; w = s.waiting.get(s.nextSsn)) {
      s.waiting.delete(s.nextSsn);
      this.heldBytes -= w.data.length + ENTRY_OVERHEAD;
      this.deliver(w);
      s.nextSsn = (s.nextSsn + 1) & 0xffff;
    }
  }

  /** Gap ack blocks as start,end offset pairs from {@link cumTsn}, at most {@link MAX_GAP_BLOCKS}. */
  gapBlocks(): number[] {
    const out: number[] = [];
    const r = this.runs;
    for (let i = 0; i < r.length && out.length < 2 * MAX_GAP_BLOCKS; i += 2) {
      const start = tsnDiff(this.cumTsn, r[i] as number);
      const end = tsnDiff(this.cumTsn, r[i + 1] as number);
      if (end > 0xffff) break;
      out.push(start, end);
    }
    return out;
  }

  /** Duplicate TSNs seen since the last call (for the next SACK). */
  takeDuplicates(): number[] {
    const d = this.dups;
    if (d.length === 0) return d;
    this.dups = [];
    return d;
  }
}
