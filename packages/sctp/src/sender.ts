/**
 * The send side of an association: the queue of fragments not yet sent, the chunks in flight, the
 * retransmission timer's RTO (RFC 9260 §6.3), SACK processing with gap blocks and fast retransmit
 * (§7.2.4), and congestion control (§7.2: slow start, congestion avoidance, fast recovery).
 * It writes chunks into packets it is given; the association decides when packets go out.
 */
import type { SackChunk } from './chunk-types.js';
import type { PacketWriter } from './codec.js';
import { chunkBytes, put } from './data-chunk-size.js';
import { tsnAdd, tsnDiff, tsnLt, tsnLte } from './serial.js';

/** One DATA chunk to send, kept until the cumulative ack passes it. */
export interface OutChunk {
  readonly tsn: number;
  readonly flags: number;
  readonly streamId: number;
  readonly ssn: number;
  readonly ppid: number;
  readonly data: Buffer;
  /** Transmissions so far. */
  sent: number;
  /** Counted in the flight size. */
  inFlight: boolean;
  /** Covered by a gap block of the latest SACK. */
  acked: boolean;
  /** Waiting to be retransmitted. */
  marked: boolean;
  /** Already fast-retransmitted once (§7.2.4: only once per chunk). */
  fastRtx: boolean;
  missCount: number;
}

/** Where {@link Sender.write} puts chunks: the packet being filled, or a fresh one. */
export interface PacketSource {
  /** The packet being filled, if any. */
  current(): PacketWriter | undefined;
  /** Sends the current packet and returns an empty one. */
  next(): PacketWriter;
}

/** RTO and congestion parameters. */
export interface SenderConfig {
  /** Bytes of DATA user data per chunk (the MTU less IP, UDP, common and DATA headers). */
  readonly maxFragment: number;
  /** Bytes of an SCTP packet (the path MTU less IP and UDP headers). */
  readonly mtu: number;
  readonly rtoInitial: number;
  readonly rtoMin: number;
  readonly rtoMax: number;
}

/** Outcome of one SACK for the association. */
export interface SackOutcome {
  /** The cumulative ack moved forward. */
  readonly advanced: boolean;
  /** Chunks were newly marked for fast retransmit. */
  readonly fastRetransmit: boolean;
}

/** See the module comment. */
export class Sender {
  nextTsn: number;
  lastCumAck: number;
  /** User bytes queued or in flight (what backpressure and 'drain' are computed from). */
  bufferedBytes = 0;
  flightSize = 0;
  cwnd: number;
  ssthresh: number;
  peerRwnd: number;
  rto: number;
  retransmits = 0;
  fastRetransmits = 0;
  private partialBytesAcked = 0;
  private srtt = 0;
  private rttvar = 0;
  private rttChunk: OutChunk | undefined;
  private rttStart = 0;
  private inFastRecovery = false;
  private fastRecoveryExit = 0;
  private readonly pending: OutChunk[] = [];
  private pendingHead = 0;
  /** Sent, not yet cumulatively acked, in TSN order, from `inflightHead` (no splice per SACK). */
  private readonly inflight: OutChunk[] = [];
  private inflightHead = 0;
  private markedCount = 0;
  /** Chunks above the cumulative ack currently flagged as gap-acked (skip the gap pass when 0). */
  private gapAckedCount = 0;
  private readonly nextSsn = new Map<number, number>();

  constructor(
    initialTsn: number,
    peerRwnd: number,
    private readonly cfg: SenderConfig,
    private readonly now: () => number,
  ) {
    this.nextTsn = initialTsn;
    this.lastCumAck = tsnAdd(initialTsn, -1);
    this.peerRwnd = peerRwnd;
    // RFC 9260 §7.2.1: initial cwnd min(4*MTU, max(2*MTU, 4380)); ssthresh the peer's window.
    this.cwnd = Math.min(4 * cfg.mtu, Math.max(2 * cfg.mtu, 4380));
    this.ssthresh = peerRwnd;
    this.rto = cfg.rtoInitial;
  }

  /** True when nothing is queued or unacknowledged. */
  get idle(): boolean {
    return this.pendingHead === this.pending.length && this.inflightHead === this.inflight.length;
  }

  /** True when chunks wait to be sent or resent. */
  get hasWork(): boolean {
    return this.pendingHead < this.pending.length || this.markedCount > 0;
  }

  /** True while any chunk is unacknowledged. */
  get outstanding(): boolean {
    return this.inflightHead < this.inflight.length;
  }

  /** Splits one message into fragments and queues them (TSNs and the SSN assigned now). */
  enqueue(streamId: number, ppid: number, unordered: boolean, data: Buffer): void {
    let ssn = 0;
    if (!unordered) {
      ssn = this.nextSsn.get(streamId) ?? 0;
      this.nextSsn.set(streamId, (ssn + 1) & 0xffff);
    }
    const max = this.cfg.maxFragment;
    const u = unordered ? 0x04 : 0;
    for (let off = 0; off < data.length; off += max) {
      const end = Math.min(off + max, data.length);
      const flags = u | (off === 0 ? 0x02 : 0) | (end === data.length ? 0x01 : 0);
      this.pending.push({
        tsn: this.nextTsn,
        flags,
        streamId,
        ssn,
        ppid,
        data: off === 0 && end === data.length ? data : data.subarray(off, end),
        sent: 0,
        inFlight: false,
        acked: false,
        marked: false,
        fastRtx: false,
        missCount: 0,
      });
      this.nextTsn = tsnAdd(this.nextTsn, 1);
    }
    this.bufferedBytes += data.length;
  }

  /**
   * Writes retransmissions, then new chunks, into `out`'s packets while the congestion and
   * receive windows allow. `fastRtxBudget` lets one packet of fast retransmissions out regardless
   * of cwnd (§7.2.4). Returns true if anything was written.
   */
  write(out: PacketSource, fastRtxBudget: boolean): boolean {
    let wrote = false;
    const now = this.now();
    if (this.markedCount > 0) {
      let allowance = fastRtxBudget ? this.cfg.mtu : 0;
      let w = out.current();
      for (let i = this.inflightHead; i < this.inflight.length; i++) {
        const c = this.inflight[i] as OutChunk;
        if (this.markedCount === 0) break;
        if (!c.marked) continue;
        const size = chunkBytes(c);
        if (this.flightSize >= this.cwnd) {
          if (allowance < size) break;
          allowance -= size;
        }
        if (w === undefined || w.room() < size) w = out.next();
        put(w, c);
        c.marked = false;
        this.markedCount--;
        c.sent++;
        c.inFlight = true;
        this.flightSize += c.data.length;
        this.peerRwnd = Math.max(0, this.peerRwnd - c.data.length);
        this.retransmits++;
        if (this.rttChunk === c) this.rttChunk = undefined;
        wrote = true;
      }
    }
    if (this.markedCount > 0) return wrote;
    let w = out.current();
    // cwnd is checked when a packet is started, not per chunk: a started packet is filled, so the
    // flight may pass cwnd by less than one packet, as RFC 9260 §6.1 B allows (cwnd + PMTU - 1),
    // and small messages go out in full packets instead of a part-filled one per window update.
    let fits = false;
    while (this.pendingHead < this.pending.length) {
      const c = this.pending[this.pendingHead] as OutChunk;
      if (this.peerRwnd < c.data.length && this.flightSize > 0) break;
      const size = chunkBytes(c);
      if (!fits || w === undefined || w.room() < size) {
        if (this.flightSize >= this.cwnd) break;
        if (w === undefined || w.room() < size) w = out.next();
        fits = true;
      }
      put(w, c);
      this.pending[this.pendingHead] = undefined as unknown as OutChunk;
      this.pendingHead++;
      c.sent = 1;
      c.inFlight = true;
      this.inflight.push(c);
      this.flightSize += c.data.length;
      this.peerRwnd = Math.max(0, this.peerRwnd - c.data.length);
      if (this.rttChunk === undefined) {
        this.rttChunk = c;
        this.rttStart = now;
      }
      wrote = true;
    }
    if (this.pendingHead > 1024 && this.pendingHead * 2 > this.pending.length) {
      this.pending.splice(0, this.pendingHead);
      this.pendingHead = 0;
    }
    return wrote;
  }

  /** Processes a SACK (or the cumulative ack of a SHUTDOWN, with `gapBlocks` empty). */
  onSack(s: SackChunk): SackOutcome | undefined {
    const cum = s.cumTsnAck;
    if (tsnLt(cum, this.lastCumAck)) return undefined;
    if (tsnLt(this.highestSent(), cum)) return undefined; // acks a TSN never sent: ignore the SACK.
    const advanced = cum !== this.lastCumAck;
    let bytesAcked = 0;
    const inflight = this.inflight;
    let n = this.inflightHead;
    while (n < inflight.length && tsnLte((inflight[n] as OutChunk).tsn, cum)) {
      const c = inflight[n] as OutChunk;
      inflight[n] = undefined as unknown as OutChunk;
      if (c.inFlight) this.flightSize -= c.data.length;
      if (!c.acked) bytesAcked += c.data.length;
      else this.gapAckedCount--;
      if (c.marked) this.markedCount--;
      this.bufferedBytes -= c.data.length;
      if (this.rttChunk === c) {
        if (c.sent === 1) this.measure(this.now() - this.rttStart);
        this.rttChunk = undefined;
      }
      n++;
    }
    this.inflightHead = n;
    if (n === inflight.length) {
      inflight.length = 0;
      this.inflightHead = 0;
    } else if (n > 4096 && n * 2 > inflight.length) {
      inflight.splice(0, n);
      this.inflightHead = 0;
    }
    this.lastCumAck = cum;
    // Gap blocks: both lists are in TSN order, so one merge pass.
    const gaps = s.gapBlocks;
    let gi = 0;
    let highestNewlyAcked: number | undefined;
    let highestAcked: number | undefined;
    const gapPass = gaps.length > 0 || this.gapAckedCount > 0;
    for (let i = this.inflightHead; gapPass && i < inflight.length; i++) {
      const c = inflight[i] as OutChunk;
      const off = tsnDiff(cum, c.tsn);
      while (gi < gaps.length && (gaps[gi + 1] as number) < off) gi += 2;
      const inGap = gi < gaps.length && (gaps[gi] as number) <= off;
      if (inGap) {
        highestAcked = c.tsn;
        if (!c.acked) {
          c.acked = true;
          this.gapAckedCount++;
          bytesAcked += c.data.length;
          highestNewlyAcked = c.tsn;
          if (c.inFlight) {
            c.inFlight = false;
            this.flightSize -= c.data.length;
          }
          if (c.marked) {
            c.marked = false;
            this.markedCount--;
          }
        }
      } else if (c.acked) {
        c.acked = false; // the peer reneged: resend it.
        this.gapAckedCount--;
        c.marked = true;
        this.markedCount++;
      }
    }
    let fastRetransmit = false;
    if (highestNewlyAcked !== undefined || (this.inFastRecovery && highestAcked !== undefined)) {
      const limit = highestNewlyAcked ?? (highestAcked as number);
      for (let i = this.inflightHead; i < inflight.length; i++) {
        const c = inflight[i] as OutChunk;
        if (!tsnLt(c.tsn, limit)) break;
        if (c.acked || c.marked || c.fastRtx) continue;
        if (++c.missCount >= 3) {
          c.fastRtx = true;
          c.marked = true;
          this.markedCount++;
          this.fastRetransmits++;
          if (c.inFlight) {
            c.inFlight = false;
            this.flightSize -= c.data.length;
          }
          fastRetransmit = true;
        }
      }
      if (fastRetransmit && !this.inFastRecovery) {
        this.inFastRecovery = true;
        this.fastRecoveryExit = this.highestSent();
        this.ssthresh = Math.max(this.cwnd >>> 1, 4 * this.cfg.mtu);
        this.cwnd = this.ssthresh;
        this.partialBytesAcked = 0;
      }
    }
    if (this.inFastRecovery && tsnLte(this.fastRecoveryExit, cum)) this.inFastRecovery = false;
    if (advanced && !this.inFastRecovery && bytesAcked > 0) {
      if (this.cwnd <= this.ssthresh) {
        this.cwnd += Math.min(bytesAcked, this.cfg.mtu);
      } else {
        this.partialBytesAcked += bytesAcked;
        if (this.partialBytesAcked >= this.cwnd) {
          this.partialBytesAcked -= this.cwnd;
          this.cwnd += this.cfg.mtu;
        }
      }
    }
    this.peerRwnd = Math.max(0, s.aRwnd - this.flightSize);
    return { advanced, fastRetransmit };
  }

  /** T3-rtx expired (§6.3.3): back off, collapse cwnd, mark everything unacknowledged. */
  onT3(): void {
    this.rto = Math.min(this.rto * 2, this.cfg.rtoMax);
    this.ssthresh = Math.max(this.cwnd >>> 1, 4 * this.cfg.mtu);
    this.cwnd = this.cfg.mtu;
    this.partialBytesAcked = 0;
    this.inFastRecovery = false;
    this.rttChunk = undefined;
    for (let i = this.inflightHead; i < this.inflight.length; i++) {
      const c = this.inflight[i] as OutChunk;
      if (c.inFlight) {
        c.inFlight = false;
        this.flightSize -= c.data.length;
      }
      if (!c.acked && !c.marked) {
        c.marked = true;
        this.markedCount++;
      }
    }
  }

  /** Doubles the RTO after a control-chunk timeout (T1, T2). */
  backOff(): void {
    this.rto = Math.min(this.rto * 2, this.cfg.rtoMax);
  }

  private highestSent(): number {
    if (this.inflightHead === this.inflight.length) return this.lastCumAck;
    return (this.inflight[this.inflight.length - 1] as OutChunk).tsn;
  }

  /** RFC 9260 §6.3.1 RTO computation with α = 1/8, β = 1/4. */
  measure(r: number): void {
    if (this.srtt === 0) {
      this.srtt = r;
      this.rttvar = r / 2;
    } else {
      this.rttvar = 0.75 * this.rttvar + 0.25 * Math.abs(this.srtt - r);
      this.srtt = 0.875 * this.srtt + 0.125 * r;
    }
    this.rto = Math.min(this.cfg.rtoMax, Math.max(this.cfg.rtoMin, this.srtt + 4 * this.rttvar));
  }

  /** Drops everything (association closed); returns the user bytes that were never acknowledged. */
  clear(): number {
    const lost = this.bufferedBytes;
    this.pending.length = 0;
    this.pendingHead = 0;
    this.inflight.length = 0;
    this.inflightHead = 0;
    this.markedCount = 0;
    this.gapAckedCount = 0;
    this.bufferedBytes = 0;
    this.flightSize = 0;
    return lost;
  }
}
