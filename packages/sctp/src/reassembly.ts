/**
 * The receive side of an association: which TSNs arrived (cumulative point, out-of-order set,
 * duplicates) for the SACK, reassembly of fragments into messages, and per-stream SSN order.
 * Everything held is bounded in bytes and entries; a chunk that would exceed a bound is dropped
 * (not acknowledged), so the sender retransmits it later instead of the receiver growing.
 */
import { type DataChunk, DataFlags } from './chunk-types.js';
import { tsnAdd, tsnDiff, tsnLte } from './serial.js';

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
  private readonly outOfOrder: number[] = [];
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
    return this.outOfOrder.length > 0;
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
      ahead > this.limits.maxOutOfOrder + 1 ||
      this.outOfOrder.length >= this.limits.maxOutOfOrder
    )
      return 'dropped';
    if (windowClosed && !tsnLte(tsn, this.highestTsn)) return 'dropped';
    const whole =
      (c.flags & (DataFlags.BEGIN | DataFlags.END)) === (DataFlags.BEGIN | DataFlags.END);
    if (this.heldBytes + queuedBytes + c.data.length + ENTRY_OVERHEAD > this.limits.maxHeldBytes) {
      // Nothing can free memory if the next expected fragment does not fit and nothing is queued:
      // the message in progress is larger than this receiver can hold.
      return !whole && ahead === 1 && queuedBytes === 0 ? 'too-big' : 'dropped';
    }
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
    return this.assemble(tsn, c);
  }

  private isOutOfOrder(tsn: number): boolean {
    const a = this.outOfOrder;
    const d = tsnDiff(this.cumTsn, tsn);
    let lo = 0;
    let hi = a.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const m = tsnDiff(this.cumTsn, a[mid] as number);
      if (m === d) return true;
      if (m < d) lo = mid + 1;
      else hi = mid;
    }
    return false;
  }

  private markReceived(tsn: number, ahead: number): void {
    if (!tsnLte(tsn, this.highestTsn)) this.highestTsn = tsn;
    if (ahead !== 1) {
      const a = this.outOfOrder;
      let lo = 0;
      let hi = a.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (tsnDiff(this.cumTsn, a[mid] as number) < ahead) lo = mid + 1;
        else hi = mid;
      }
      a.splice(lo, 0, tsn);
      return;
    }
    this.cumTsn = tsn;
    const a = this.outOfOrder;
    let n = 0;
    while (n < a.length && a[n] === tsnAdd(this.cumTsn, 1)) {
      this.cumTsn = a[n] as number;
      n++;
    }
    if (n > 0) a.splice(0, n);
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
    const a = this.outOfOrder;
    let i = 0;
    while (i < a.length && out.length < 2 * MAX_GAP_BLOCKS) {
      const start = tsnDiff(this.cumTsn, a[i] as number);
      let end = start;
      i++;
      while (i < a.length && tsnDiff(this.cumTsn, a[i] as number) === end + 1) {
        end++;
        i++;
      }
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
