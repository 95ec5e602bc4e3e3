/**
 * One SCTP association (RFC 9260): the state machine from COOKIE-WAIT to CLOSED, dispatch of the
 * chunks of each packet the endpoint routed here, and the flush that bundles control chunks, SACK,
 * retransmissions and new DATA into packets. Data structures of each direction live in
 * {@link Sender} and {@link Receiver}; the surface's types in association-types.ts.
 *
 * Longer than 400 lines because the state machine is one class: every chunk handler, timer and the
 * flush read and move the same private state (state, error count, timers, both directions), and
 * splitting it would turn that state into a public surface between files.
 */
import { EventEmitter } from 'eventemitter3';
import type {
  AssociationState,
  PeerParameters,
  SctpAssociationCounters,
  SctpAssociationEvents,
  SctpCloseInfo,
  SctpCloseReason,
  SctpMessage,
  SctpOutboundMessage,
} from './association-types.js';
import { zeroAssociationCounters } from './association-types.js';
import { CauseCode, ChunkType, FLAG_T, type ParsedPacket, type RawChunk } from './chunk-types.js';
import {
  CodecError,
  decodeData,
  decodeInit,
  decodeSack,
  decodeShutdown,
  encodeCause,
  firstCause,
  PacketWriter,
} from './codec.js';
import { maxFragmentBytes } from './data-chunk-size.js';
import {
  SctpAssociationError,
  SctpInvalidStreamError,
  SctpMessageSizeError,
  SctpNotWritableError,
  SctpSendBufferFullError,
} from './errors.js';
import type { ResolvedAssociationOptions } from './options.js';
import { type InboundMessage, Receiver } from './reassembly.js';
import { type PacketSource, Sender } from './sender.js';
import { type SctpTimers, Timer } from './timers.js';

/** What an association needs from the endpoint that owns it. */
export interface AssociationHost {
  readonly timers: SctpTimers;
  /**
   * Sends a packet to the peer. `bulk` marks the DATA / SACK packets of a flush: they go out without
   * a completion callback (one fewer tick and closure per packet on the hot path; a lost one is
   * what retransmission is for), so only the others count in the endpoint's `sendErrors`.
   */
  transmit(a: Association, packet: Buffer, bulk?: boolean): void;
  released(a: Association): void;
  /**
   * True when the transport writes the checksum of every packet sent (the C helper of `udpIo:
   * 'helper'`): the association then leaves it to the transport instead of computing it in JS.
   */
  readonly checksumOffload?: boolean;
}

/** Everything fixed when an association is made. */
export interface AssociationParams {
  readonly host: AssociationHost;
  readonly options: ResolvedAssociationOptions;
  /** IP + UDP header bytes (28 for IPv4, 48 for IPv6). */
  readonly overhead: number;
  readonly localAddress: string;
  readonly localPort: number;
  readonly localEncapsulationPort: number;
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly remoteEncapsulationPort: number;
  readonly localTag: number;
  readonly localInitialTsn: number;
  /** Given for an association made from a State Cookie (it starts established). */
  readonly peer?: PeerParameters;
}

/** See the module comment. Made by the endpoint; users get it from `connect` or a listener. */
export class Association extends EventEmitter<SctpAssociationEvents> {
  state: AssociationState;
  readonly localAddress: string;
  readonly localPort: number;
  readonly localEncapsulationPort: number;
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** Learned from the packets the peer sends (RFC 6951 §5.4). */
  remoteEncapsulationPort: number;
  readonly localTag: number;
  peerTag = 0;
  /** Negotiated stream counts (0 until the handshake completes). */
  outboundStreams = 0;
  inboundStreams = 0;
  readonly counters: SctpAssociationCounters = zeroAssociationCounters();
  closeInfo: SctpCloseInfo | undefined;

  private readonly host: AssociationHost;
  private readonly opt: ResolvedAssociationOptions;
  private readonly packetBytes: number;
  private readonly localInitialTsn: number;
  private sender: Sender | undefined;
  private receiver: Receiver | undefined;
  private readonly ctrl: Array<{ type: number; flags: number; value: Buffer | undefined }> = [];
  private cookie: Buffer | undefined;
  private flushScheduled = false;
  private sackNow = false;
  /** A SACK is due, and leaves once the datagrams at hand have been read (setImmediate). */
  private sackSoon = false;
  /** Whether TSNs were missing before the packet being handled. */
  private hadGaps = false;
  private fastRtxPending = false;
  private packetsSinceSack = 0;
  private errorCount = 0;
  private initRetransmits = 0;
  private t1Rto: number;
  private paused = false;
  private readonly queue: SctpMessage[] = [];
  private queueHead = 0;
  /** Bytes delivered by the protocol but not yet handed to the user (paused). */
  queuedBytes = 0;
  private needDrain = false;
  private lastAdvertised = 0;
  private readonly t1: Timer;
  private readonly t2: Timer;
  private readonly t3: Timer;
  /** T5-shutdown-guard (RFC 9260 §9.2): bounds SHUTDOWN-SENT, which DATA from the peer prolongs. */
  private readonly t5: Timer;
  private readonly sackTimer: Timer;
  private readonly hbTimer: Timer;
  private readonly deliverBound = (m: InboundMessage): void => this.deliver(m);
  private readonly flushBound = (): void => this.containedFlush();
  private dataFlushScheduled = false;
  private readonly dataFlushBound = (): void => {
    this.dataFlushScheduled = false;
    if (!this.flushScheduled) this.containedFlush();
  };
  /** False when the host's transport writes the checksums ({@link AssociationHost.checksumOffload}). */
  private readonly sealChecksum: boolean;
  /** The packet a flush is filling. */
  private w: PacketWriter | undefined;
  /** What the sender writes DATA through: made once (a closure per flush cost more than it did). */
  private readonly out: PacketSource = {
    current: () => this.w,
    next: () => this.nextPacket(),
  };

  constructor(p: AssociationParams) {
    super();
    this.host = p.host;
    this.sealChecksum = p.host.checksumOffload !== true;
    this.opt = p.options;
    this.packetBytes = p.options.mtu - p.overhead;
    this.localAddress = p.localAddress;
    this.localPort = p.localPort;
    this.localEncapsulationPort = p.localEncapsulationPort;
    this.remoteAddress = p.remoteAddress;
    this.remotePort = p.remotePort;
    this.remoteEncapsulationPort = p.remoteEncapsulationPort;
    this.localTag = p.localTag;
    this.localInitialTsn = p.localInitialTsn;
    this.t1Rto = p.options.rtoInitial;
    const timers = p.host.timers;
    this.t1 = new Timer(timers, () => this.onT1());
    this.t2 = new Timer(timers, () => this.onT2());
    this.t3 = new Timer(timers, () => this.onT3());
    this.t5 = new Timer(timers, () => {
      if (this.state === 'shutdown-sent' || this.state === 'shutdown-ack-sent') {
        this.fail(
          'timeout',
          `shutdown not complete after ${5 * this.opt.rtoMax} ms (T5-shutdown-guard)`,
          CauseCode.USER_INITIATED_ABORT,
        );
      }
    });
    this.sackTimer = new Timer(timers, () => {
      this.sackNow = true;
      this.flush();
    });
    this.hbTimer = new Timer(timers, () => this.onHeartbeatTimer());
    if (p.peer) {
      this.setPeer(p.peer);
      this.state = 'established';
      this.armHeartbeat();
    } else {
      this.state = 'cookie-wait';
    }
  }

  /** True once CLOSED (a getter, so checks after callbacks are not narrowed away). */
  get isClosed(): boolean {
    return this.state === 'closed';
  }

  /** User bytes queued or unacknowledged. */
  get bufferedAmount(): number {
    return this.sender?.bufferedBytes ?? 0;
  }

  /** Current congestion window, bytes (for tests and metrics). */
  get cwnd(): number {
    return this.sender?.cwnd ?? 0;
  }

  /** Current retransmission timeout, ms. */
  get rto(): number {
    return this.sender?.rto ?? this.t1Rto;
  }

  private setPeer(peer: PeerParameters): void {
    const o = this.opt;
    this.peerTag = peer.peerTag;
    this.outboundStreams = peer.outboundStreams;
    this.inboundStreams = peer.inboundStreams;
    const maxFragment = maxFragmentBytes(this.packetBytes);
    this.sender = new Sender(
      this.localInitialTsn,
      peer.peerRwnd,
      {
        maxFragment,
        mtu: this.packetBytes,
        rtoInitial: o.rtoInitial,
        rtoMin: o.rtoMin,
        rtoMax: o.rtoMax,
      },
      this.host.timers.now,
    );
    this.receiver = new Receiver(
      peer.peerInitialTsn,
      peer.inboundStreams,
      {
        maxMessageBytes: o.maxMessageBytes,
        maxHeldBytes: o.receiveWindow + o.maxMessageBytes,
        maxOutOfOrder: o.maxOutOfOrder,
      },
      this.deliverBound,
    );
    this.lastAdvertised = o.receiveWindow;
  }

  // ---- user API -------------------------------------------------------------------------------

  /**
   * Queues one message. Returns false when the send buffer is at or past `sendHighWaterMark`
   * (the message is still queued): wait for 'drain'. Throws a coded error for misuse.
   */
  send(m: SctpOutboundMessage): boolean {
    if (this.state !== 'established') throw new SctpNotWritableError(this.state);
    const streamId = m.streamId ?? 0;
    const sender = this.sender as Sender;
    if (!Number.isInteger(streamId) || streamId < 0 || streamId >= this.outboundStreams) {
      throw new SctpInvalidStreamError(streamId, this.outboundStreams);
    }
    const len = m.data.length;
    if (len === 0 || len > this.opt.maxMessageBytes)
      throw new SctpMessageSizeError(len, this.opt.maxMessageBytes);
    if (sender.bufferedBytes + len > this.opt.maxSendBufferBytes) {
      throw new SctpSendBufferFullError(sender.bufferedBytes, this.opt.maxSendBufferBytes);
    }
    sender.enqueue(streamId, (m.ppid ?? 0) >>> 0, m.unordered === true, m.data);
    this.counters.messagesOut++;
    this.counters.bytesOut += len;
    this.scheduleDataFlush();
    if (sender.bufferedBytes >= this.opt.sendHighWaterMark) {
      this.needDrain = true;
      return false;
    }
    return true;
  }

  /** Stops handing messages to the user; they queue, and the advertised window shrinks. */
  pause(): void {
    this.paused = true;
  }

  /** Hands queued messages over again and reopens the window. */
  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    while (!this.paused && this.queueHead < this.queue.length && !this.isClosed) {
      const m = this.queue[this.queueHead] as SctpMessage;
      this.queue[this.queueHead++] = undefined as unknown as SctpMessage;
      this.queuedBytes -= m.data.length;
      this.emit('message', m);
    }
    if (this.queueHead === this.queue.length) {
      this.queue.length = 0;
      this.queueHead = 0;
      if (this.state === 'shutdown-received') {
        this.progressShutdown();
        this.scheduleFlush();
      }
    }
    if (!this.isClosed && this.advertisedWindow() - this.lastAdvertised >= this.packetBytes) {
      this.sackNow = true;
      this.scheduleFlush();
    }
  }

  /** True while paused. */
  get isPaused(): boolean {
    return this.paused;
  }

  /** Graceful close: sends what is queued, then SHUTDOWN; 'close' follows with reason `shutdown`. */
  shutdown(): void {
    if (this.state === 'established') {
      this.state = 'shutdown-pending';
      this.progressShutdown();
      this.scheduleFlush();
    } else if (this.state === 'cookie-wait' || this.state === 'cookie-echoed') {
      this.abort('shutdown before the association was established');
    }
  }

  /** Ends the association now with an ABORT carrying `reason` (User-Initiated Abort cause). */
  abort(reason = 'aborted by the application'): void {
    if (this.isClosed) return;
    this.sendAbort(CauseCode.USER_INITIATED_ABORT, Buffer.from(reason.slice(0, 128)));
    this.finish('abort-local', reason);
  }

  // ---- inbound --------------------------------------------------------------------------------

  /**
   * Processes one packet the endpoint matched to this association. `udpPort` is the sender's UDP
   * port (the remote encapsulation port is updated from verified packets).
   */
  handle(p: ParsedPacket, udpPort: number): void {
    if (this.isClosed) return;
    this.counters.packetsIn++;
    const byLocalTag = p.vtag === this.localTag;
    if (byLocalTag) this.remoteEncapsulationPort = udpPort;
    let gotData = false;
    let reported = false;
    // A packet that fills a hole is acknowledged at once too (RFC 5681 §3.2, which §6.2 follows).
    this.hadGaps = this.receiver?.hasGaps === true;
    for (const c of p.chunks) {
      if (this.isClosed) return;
      if (!byLocalTag) {
        // Only T-bit ABORT / SHUTDOWN COMPLETE carry the peer's tag (RFC 9260 §8.5.1).
        if ((c.flags & FLAG_T) !== 0 && p.vtag === this.peerTag) {
          if (c.type === ChunkType.ABORT) this.onAbort(c);
          else if (c.type === ChunkType.SHUTDOWN_COMPLETE) this.onShutdownComplete();
        }
        continue;
      }
      switch (c.type) {
        case ChunkType.DATA:
          gotData = true;
          this.onData(c);
          break;
        case ChunkType.SACK:
          this.onSack(c);
          break;
        case ChunkType.INIT_ACK:
          this.onInitAck(c);
          break;
        case ChunkType.COOKIE_ACK:
          this.onCookieAck();
          break;
        case ChunkType.COOKIE_ECHO:
          if (this.state !== 'cookie-wait' && this.state !== 'cookie-echoed')
            this.queueCtrl(ChunkType.COOKIE_ACK);
          break;
        case ChunkType.HEARTBEAT:
          if (this.state !== 'cookie-wait') this.queueCtrl(ChunkType.HEARTBEAT_ACK, 0, c.value);
          break;
        case ChunkType.HEARTBEAT_ACK:
          if (this.sender !== undefined && !this.sender.outstanding) this.errorCount = 0;
          break;
        case ChunkType.INIT: // never valid with a non-zero tag
          break;
        case ChunkType.ABORT:
          if ((c.flags & FLAG_T) === 0) this.onAbort(c);
          break;
        case ChunkType.SHUTDOWN:
          this.onShutdown(c);
          break;
        case ChunkType.SHUTDOWN_ACK:
          this.onShutdownAck();
          break;
        case ChunkType.SHUTDOWN_COMPLETE:
          if ((c.flags & FLAG_T) === 0) this.onShutdownComplete();
          break;
        case ChunkType.ERROR:
          this.onErrorChunk(c);
          break;
        default: {
          // RFC 9260 §3.2: the two top bits say stop or skip, and whether to report.
          // One report per packet: a packet of 256 unknown chunks must not make 256 ERRORs.
          const action = c.type >> 6;
          if ((action === 1 || action === 3) && !reported) {
            reported = true;
            this.reportUnrecognized(c);
          }
          if (action <= 1) {
            this.afterPacket(gotData);
            return;
          }
        }
      }
    }
    this.afterPacket(gotData);
  }

  private afterPacket(gotData: boolean): void {
    if (this.isClosed) return;
    if (gotData && this.receiver) {
      this.packetsSinceSack++;
      if (
        this.packetsSinceSack >= this.opt.maxPacketsPerSack ||
        this.receiver.hasGaps ||
        this.hadGaps ||
        this.receiver.hasDuplicates ||
        this.state === 'shutdown-sent'
      ) {
        this.sackNow = true;
      } else if (this.packetsSinceSack >= 2) {
        this.sackSoon = true;
      } else {
        this.sackTimer.ensure(this.opt.sackDelay);
      }
      if (this.state === 'shutdown-sent') {
        this.queueCtrl(ChunkType.SHUTDOWN, 0, this.cumTsnValue());
        this.t2.start(this.rto);
      }
    }
    if (this.sackNow || this.ctrl.length > 0) this.scheduleFlush();
    else if (this.sackSoon || this.sender?.hasWork === true) this.scheduleDataFlush();
  }

  private onData(c: RawChunk): void {
    const r = this.receiver;
    if (r === undefined || this.state === 'cookie-wait' || this.state === 'cookie-echoed') return;
    const d = decodeData(c);
    if (d instanceof CodecError) {
      if (d.reason === 'no-user-data') {
        const info = Buffer.alloc(4);
        if (c.value.length >= 4) c.value.copy(info, 0, 0, 4);
        this.fail('protocol-error', 'DATA chunk without user data', CauseCode.NO_USER_DATA, info);
      } else {
        this.counters.droppedChunks++;
      }
      return;
    }
    const result = r.receive(d, this.advertisedWindow() === 0, this.queuedBytes);
    switch (result) {
      case 'duplicate':
        this.counters.duplicateChunks++;
        break;
      case 'dropped':
        this.counters.droppedChunks++;
        this.sackNow = true;
        break;
      case 'invalid-stream': {
        const info = Buffer.alloc(4);
        info.writeUInt16BE(d.streamId, 0);
        this.queueCtrl(ChunkType.ERROR, 0, encodeCause(CauseCode.INVALID_STREAM, info));
        break;
      }
      case 'too-big':
        this.fail(
          'protocol-error',
          `receive buffer exhausted: an incoming message larger than ${this.opt.maxMessageBytes} bytes, or held data that can never be delivered`,
          CauseCode.OUT_OF_RESOURCE,
        );
        break;
      default:
    }
  }

  private deliver(m: InboundMessage): void {
    this.counters.messagesIn++;
    this.counters.bytesIn += m.data.length;
    if (this.paused || this.queueHead < this.queue.length) {
      this.queue.push(m);
      this.queuedBytes += m.data.length;
      return;
    }
    this.emit('message', m);
  }

  private onSack(c: RawChunk): void {
    const sender = this.sender;
    if (sender === undefined || this.state === 'cookie-wait' || this.state === 'cookie-echoed')
      return;
    const s = decodeSack(c);
    if (s instanceof CodecError) {
      this.counters.droppedChunks++;
      return;
    }
    const out = sender.onSack(s);
    if (out === undefined) return;
    this.afterAck(out.advanced, out.fastRetransmit);
  }

  private afterAck(advanced: boolean, fastRetransmit: boolean): void {
    const sender = this.sender as Sender;
    if (advanced) this.errorCount = 0;
    if (fastRetransmit) this.fastRtxPending = true;
    this.counters.retransmits = sender.retransmits;
    this.counters.fastRetransmits = sender.fastRetransmits;
    if (!sender.outstanding) this.t3.stop();
    else if (advanced) this.t3.start(sender.rto);
    if (
      this.needDrain &&
      sender.bufferedBytes < this.opt.sendHighWaterMark &&
      this.state === 'established'
    ) {
      this.needDrain = false;
      this.emit('drain');
    }
    this.progressShutdown();
    if (this.fastRtxPending || this.ctrl.length > 0) this.scheduleFlush();
    else if (sender.hasWork) this.scheduleDataFlush();
  }

  private onInitAck(c: RawChunk): void {
    if (this.state !== 'cookie-wait') return;
    const init = decodeInit(c);
    if (init instanceof CodecError) {
      this.counters.droppedChunks++;
      return;
    }
    this.setPeer({
      peerTag: init.initiateTag,
      peerInitialTsn: init.initialTsn,
      peerRwnd: init.aRwnd,
      outboundStreams: Math.min(this.opt.outboundStreams, init.inboundStreams),
      inboundStreams: Math.min(this.opt.inboundStreams, init.outboundStreams),
    });
    const cookie = init.cookie as Buffer;
    if (12 + 4 + cookie.length > this.packetBytes) {
      // A COOKIE ECHO must fit one packet (no fragmentation below SCTP here): fail now, clearly,
      // instead of sending empty packets until Max.Init.Retransmits.
      this.finish('connect-failed', `State Cookie of ${cookie.length} bytes does not fit a packet`);
      return;
    }
    this.cookie = Buffer.from(cookie);
    this.state = 'cookie-echoed';
    this.initRetransmits = 0;
    this.t1Rto = this.opt.rtoInitial;
    this.sendCookieEcho();
  }

  private onCookieAck(): void {
    if (this.state !== 'cookie-echoed') return;
    this.t1.stop();
    this.cookie = undefined;
    this.state = 'established';
    this.armHeartbeat();
    this.emit('established');
  }

  private onShutdown(c: RawChunk): void {
    const cum = decodeShutdown(c);
    if (cum instanceof CodecError || this.sender === undefined) return;
    switch (this.state) {
      case 'established':
      case 'shutdown-pending':
      case 'shutdown-received': {
        const first = this.state !== 'shutdown-received';
        this.state = 'shutdown-received';
        this.needDrain = false;
        const out = this.sender.onSack({
          cumTsnAck: cum,
          aRwnd: this.sender.peerRwnd + this.sender.flightSize,
          gapBlocks: [],
          duplicates: 0,
        });
        if (first) this.emit('shutdown');
        if ((this.state as AssociationState) !== 'shutdown-received') return;
        if (out) this.afterAck(out.advanced, out.fastRetransmit);
        else this.progressShutdown();
        break;
      }
      case 'shutdown-sent':
        this.t2.stop();
        this.state = 'shutdown-ack-sent';
        this.queueCtrl(ChunkType.SHUTDOWN_ACK);
        this.t2.start(this.rto);
        break;
      case 'shutdown-ack-sent':
        this.queueCtrl(ChunkType.SHUTDOWN_ACK);
        break;
      default:
    }
  }

  private onShutdownAck(): void {
    if (this.state !== 'shutdown-sent' && this.state !== 'shutdown-ack-sent') return;
    const w = new PacketWriter(this.packetBytes, this.localPort, this.remotePort, this.peerTag);
    w.raw(ChunkType.SHUTDOWN_COMPLETE, 0);
    this.transmit(w.finish(this.sealChecksum));
    this.finish('shutdown', 'graceful shutdown');
  }

  private onShutdownComplete(): void {
    if (this.state === 'shutdown-ack-sent') this.finish('shutdown', 'graceful shutdown');
  }

  private onAbort(c: RawChunk): void {
    const cause = firstCause(c);
    let detail = 'peer sent ABORT';
    if (cause) {
      detail += ` (cause ${cause.code}`;
      if (
        cause.code === CauseCode.USER_INITIATED_ABORT ||
        cause.code === CauseCode.PROTOCOL_VIOLATION
      ) {
        detail += `: ${JSON.stringify(cause.info.subarray(0, 64).toString('latin1'))}`;
      }
      detail += ')';
    }
    this.finish(
      this.state === 'cookie-wait' || this.state === 'cookie-echoed'
        ? 'connect-failed'
        : 'abort-remote',
      detail,
    );
  }

  private onErrorChunk(c: RawChunk): void {
    const cause = firstCause(c);
    if (cause?.code === CauseCode.STALE_COOKIE && this.state === 'cookie-echoed') {
      this.finish('connect-failed', 'peer reported a stale cookie');
    }
  }

  private reportUnrecognized(c: RawChunk): void {
    // The chunk is echoed truncated to 64 bytes of value, its length field saying what is echoed.
    const body = Buffer.alloc(4 + Math.min(c.value.length, 64));
    body[0] = c.type;
    body[1] = c.flags;
    body.writeUInt16BE(body.length, 2);
    c.value.copy(body, 4, 0, body.length - 4);
    this.queueCtrl(ChunkType.ERROR, 0, encodeCause(CauseCode.UNRECOGNIZED_CHUNK, body));
  }

  // ---- handshake and timers -------------------------------------------------------------------

  /** Sends the INIT of an association made by `connect` and arms T1-init. */
  startInit(): void {
    const o = this.opt;
    const w = new PacketWriter(this.packetBytes, this.localPort, this.remotePort, 0);
    w.init(ChunkType.INIT, {
      initiateTag: this.localTag,
      aRwnd: o.receiveWindow,
      outboundStreams: o.outboundStreams,
      inboundStreams: o.inboundStreams,
      initialTsn: this.localInitialTsn,
    });
    this.transmit(w.finish(this.sealChecksum));
    this.t1.start(this.t1Rto);
  }

  private sendCookieEcho(): void {
    const w = new PacketWriter(this.packetBytes, this.localPort, this.remotePort, this.peerTag);
    w.raw(ChunkType.COOKIE_ECHO, 0, this.cookie);
    this.transmit(w.finish(this.sealChecksum));
    this.t1.start(this.t1Rto);
  }

  private onT1(): void {
    if (this.state !== 'cookie-wait' && this.state !== 'cookie-echoed') return;
    if (++this.initRetransmits > this.opt.maxInitRetransmits) {
      this.finish(
        'connect-failed',
        `no answer to ${this.state === 'cookie-wait' ? 'INIT' : 'COOKIE ECHO'} after ${this.initRetransmits} tries`,
      );
      return;
    }
    this.counters.timeouts++;
    this.t1Rto = Math.min(this.t1Rto * 2, this.opt.rtoMax);
    if (this.state === 'cookie-wait') this.startInit();
    else this.sendCookieEcho();
  }

  private onT2(): void {
    if (this.state !== 'shutdown-sent' && this.state !== 'shutdown-ack-sent') return;
    if (++this.errorCount > this.opt.maxRetransmits) {
      if (this.state === 'shutdown-ack-sent') {
        // Both sides' data was acknowledged (the peer's SHUTDOWN, our acked queue): only its
        // SHUTDOWN COMPLETE is missing, so the association did end gracefully.
        this.finish('shutdown', 'graceful shutdown (SHUTDOWN COMPLETE never arrived)');
      } else {
        this.fail('timeout', 'no answer to SHUTDOWN', CauseCode.USER_INITIATED_ABORT);
      }
      return;
    }
    this.counters.timeouts++;
    const sender = this.sender as Sender;
    sender.backOff();
    if (this.state === 'shutdown-sent') this.queueCtrl(ChunkType.SHUTDOWN, 0, this.cumTsnValue());
    else this.queueCtrl(ChunkType.SHUTDOWN_ACK);
    this.t2.start(sender.rto);
    this.flush();
  }

  private onT3(): void {
    const sender = this.sender;
    if (sender === undefined || !sender.outstanding || this.isClosed) return;
    if (++this.errorCount > this.opt.maxRetransmits) {
      this.fail(
        'timeout',
        `data unacknowledged after ${this.opt.maxRetransmits} retransmissions`,
        CauseCode.USER_INITIATED_ABORT,
      );
      return;
    }
    this.counters.timeouts++;
    sender.onT3();
    this.flush();
    this.t3.start(sender.rto);
  }

  private armHeartbeat(): void {
    if (this.opt.heartbeatInterval > 0) this.hbTimer.start(this.opt.heartbeatInterval + this.rto);
  }

  /** HEARTBEAT while idle (RFC 9260 §8.3); while data is outstanding T3 watches the peer instead. */
  private onHeartbeatTimer(): void {
    if (this.isClosed) return;
    const sender = this.sender as Sender;
    if (!sender.outstanding) {
      if (++this.errorCount > this.opt.maxRetransmits) {
        this.fail(
          'timeout',
          `${this.opt.maxRetransmits} heartbeats unanswered`,
          CauseCode.USER_INITIATED_ABORT,
        );
        return;
      }
      const info = Buffer.alloc(12);
      info.writeUInt16BE(1, 0); // Heartbeat Info parameter
      info.writeUInt16BE(12, 2);
      info.writeDoubleBE(this.host.timers.now(), 4);
      this.queueCtrl(ChunkType.HEARTBEAT, 0, info);
      this.flush();
    }
    this.armHeartbeat();
  }

  private progressShutdown(): void {
    const sender = this.sender;
    if (sender === undefined || !sender.idle) return;
    if (this.state === 'shutdown-pending') {
      this.state = 'shutdown-sent';
      this.t3.stop();
      this.queueCtrl(ChunkType.SHUTDOWN, 0, this.cumTsnValue());
      this.t2.start(sender.rto);
      this.t5.start(5 * this.opt.rtoMax);
    } else if (this.state === 'shutdown-received' && this.queueHead === this.queue.length) {
      // Not while messages wait for a paused user: SHUTDOWN ACK leads to CLOSED, which would drop
      // them although the peer had them acknowledged (a relay pausing for backpressure lost them).
      this.state = 'shutdown-ack-sent';
      this.t3.stop();
      this.queueCtrl(ChunkType.SHUTDOWN_ACK);
      this.t2.start(sender.rto);
    }
  }

  // ---- outbound -------------------------------------------------------------------------------

  private cumTsnValue(): Buffer {
    const b = Buffer.allocUnsafe(4);
    b.writeUInt32BE((this.receiver as Receiver).cumTsn >>> 0, 0);
    return b;
  }

  /** The a_rwnd to advertise: the window less what waits for the user, and less held out-of-order bytes. */
  advertisedWindow(): number {
    const r = this.receiver;
    const held = r?.hasGaps ? r.heldBytes : 0;
    return Math.max(0, this.opt.receiveWindow - this.queuedBytes - held);
  }

  private queueCtrl(type: number, flags = 0, value?: Buffer): void {
    if (this.ctrl.length < 64) this.ctrl.push({ type, flags, value });
  }

  /** A flush before anything else runs: a SACK or a control chunk is due. */
  private scheduleFlush(): void {
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      queueMicrotask(this.flushBound);
    }
  }

  /**
   * A flush once the event loop has handled the datagrams and callbacks at hand (setImmediate):
   * for new DATA only (user sends, window opened by a SACK). Messages a relay forwards from several
   * incoming packets, and the room several SACKs of one batch open, then go out as full packets in
   * one flush instead of one part-filled packet per event. SACKs never wait for it.
   */
  private scheduleDataFlush(): void {
    if (!this.flushScheduled && !this.dataFlushScheduled) {
      this.dataFlushScheduled = true;
      setImmediate(this.dataFlushBound);
    }
  }

  private transmit(packet: Buffer, bulk = false): void {
    this.counters.packetsOut++;
    this.host.transmit(this, packet, bulk);
  }

  /** Sends the packet being built (if it holds anything) and starts a new one. */
  private nextPacket(): PacketWriter {
    const w = this.w;
    if (w !== undefined && w.chunks > 0) this.transmit(w.finish(this.sealChecksum), true);
    this.w = new PacketWriter(this.packetBytes, this.localPort, this.remotePort, this.peerTag);
    return this.w;
  }

  /**
   * A flush from a microtask or setImmediate, where nothing above would catch: an internal error
   * ends this association (ABORT, 'close' with reason `internal-error`), never the process.
   */
  private containedFlush(): void {
    try {
      this.flush();
    } catch (err) {
      const detail = `internal error while sending: ${err instanceof Error ? err.message : String(err)}`;
      try {
        this.fail('internal-error', detail);
      } catch {
        this.finish('internal-error', detail);
      }
    }
  }

  /** Bundles control chunks, the SACK, retransmissions and new DATA into packets and sends them. */
  private flush(): void {
    this.flushScheduled = false;
    if (this.isClosed || this.state === 'cookie-wait' || this.state === 'cookie-echoed') return;
    this.w = undefined;
    for (const c of this.ctrl) {
      const w = this.w as PacketWriter | undefined;
      if (w === undefined || !w.raw(c.type, c.flags, c.value))
        this.nextPacket().raw(c.type, c.flags, c.value);
    }
    this.ctrl.length = 0;
    const sender = this.sender as Sender;
    const receiver = this.receiver as Receiver;
    const sendsData =
      sender.hasWork &&
      (this.state === 'established' ||
        this.state === 'shutdown-pending' ||
        this.state === 'shutdown-received');
    if (this.sackNow || this.sackSoon || (this.sackTimer.running && sendsData)) {
      const gaps = receiver.gapBlocks();
      const dups = receiver.takeDuplicates();
      const rwnd = this.advertisedWindow();
      const w = this.w as PacketWriter | undefined;
      if (w === undefined || !w.sack(receiver.cumTsn, rwnd, gaps, dups))
        this.nextPacket().sack(receiver.cumTsn, rwnd, gaps, dups);
      this.lastAdvertised = rwnd;
      this.sackNow = false;
      this.sackSoon = false;
      this.packetsSinceSack = 0;
      this.sackTimer.stop();
    }
    if (sendsData) sender.write(this.out, this.fastRtxPending);
    this.fastRtxPending = false;
    const last = this.w as PacketWriter | undefined;
    this.w = undefined;
    if (last !== undefined && last.chunks > 0) this.transmit(last.finish(this.sealChecksum), true);
    this.counters.retransmits = sender.retransmits;
    if (sender.outstanding && this.state !== 'shutdown-sent' && this.state !== 'shutdown-ack-sent')
      this.t3.ensure(sender.rto);
  }

  private sendAbort(code: number, info?: Buffer): void {
    if (this.state === 'cookie-wait' || this.peerTag === 0) return;
    const w = new PacketWriter(this.packetBytes, this.localPort, this.remotePort, this.peerTag);
    w.raw(ChunkType.ABORT, 0, encodeCause(code, info));
    this.transmit(w.finish(this.sealChecksum));
  }

  /** Ends the association because of an error, telling the peer with an ABORT. */
  fail(
    reason: SctpCloseReason,
    detail: string,
    code: number = CauseCode.PROTOCOL_VIOLATION,
    info?: Buffer,
  ): void {
    if (this.isClosed) return;
    this.sendAbort(
      code,
      info ??
        (code === CauseCode.PROTOCOL_VIOLATION || code === CauseCode.USER_INITIATED_ABORT
          ? Buffer.from(detail.slice(0, 128))
          : undefined),
    );
    this.finish(reason, detail);
  }

  /** Moves to CLOSED without sending anything: timers stopped, buffers dropped, 'close' emitted. */
  finish(reason: SctpCloseReason, detail: string): void {
    if (this.isClosed) return;
    this.state = 'closed';
    this.t1.cancel();
    this.t2.cancel();
    this.t3.cancel();
    this.t5.cancel();
    this.sackTimer.cancel();
    this.hbTimer.cancel();
    const unsentBytes = this.sender?.clear() ?? 0;
    this.queue.length = 0;
    this.queueHead = 0;
    this.queuedBytes = 0;
    this.ctrl.length = 0;
    this.host.released(this);
    this.closeInfo = {
      reason,
      detail,
      error: reason === 'shutdown' ? undefined : new SctpAssociationError(reason, detail),
      unsentBytes,
    };
    this.emit('close', this.closeInfo);
    this.removeAllListeners();
  }
}
