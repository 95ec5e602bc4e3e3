/**
 * An {@link SctpEngine} around a foreign SCTP stack that handles one association per instance
 * (npm `sctp`, `werift-sctp`): this file does what neither stack does for itself (RFC 6951 UDP
 * sockets, a demultiplexer on addresses, UDP port and SCTP ports that creates a server instance only
 * for an INIT, the guard, containment of the stack's exceptions per association, backpressure) and
 * a {@link ForeignStack} drives the stack. Test support only: both stacks are devDependencies, and the
 * engine the package ships is ours (docs/sctp.md "Why our own engine" has the suite's figures).
 */
import { createSocket, type Socket } from 'node:dgram';
import { isIPv6 } from 'node:net';
import { EventEmitter } from 'eventemitter3';
import { zeroAssociationCounters } from '../association-types.js';
import { ChunkType } from '../chunk-types.js';
import { CodecError } from '../codec.js';
import { SctpAssociationError } from '../errors.js';
import { guardPacket } from '../guard.js';
import {
  type AssociationState,
  DEFAULT_ENCAPSULATION_PORT,
  type SctpAssociation,
  type SctpAssociationCounters,
  type SctpAssociationEvents,
  type SctpCloseInfo,
  type SctpCloseReason,
  SctpConnectError,
  type SctpConnectOptions,
  type SctpEngine,
  type SctpListener,
  type SctpListenerEvents,
  type SctpListenOptions,
  type SctpMessage,
  SctpNotWritableError,
  type SctpOutboundMessage,
} from '../index.js';
import type {
  ForeignDriver,
  ForeignEngineCounters,
  ForeignEngineOptions,
  ForeignHost,
  ForeignStack,
} from './engine-foreign-types.js';

export type {
  ForeignDriver,
  ForeignEngineCounters,
  ForeignEngineOptions,
  ForeignHost,
  ForeignStack,
} from './engine-foreign-types.js';

class ForeignAssociation extends EventEmitter<SctpAssociationEvents> implements SctpAssociation {
  state: AssociationState = 'cookie-wait';
  outboundStreams = 0;
  inboundStreams = 0;
  bufferedAmount = 0;
  closeInfo: SctpCloseInfo | undefined;
  isPaused = false;
  readonly counters: SctpAssociationCounters = zeroAssociationCounters();
  driver: ForeignDriver | undefined;
  private readonly held: SctpMessage[] = [];
  private needDrain = false;

  constructor(
    private readonly engine: ForeignSctpEngine,
    readonly socket: Socket,
    readonly localAddress: string,
    readonly localPort: number,
    readonly remoteAddress: string,
    readonly remotePort: number,
    public remoteEncapsulationPort: number,
    private readonly onGone: () => void,
  ) {
    super();
  }

  get localEncapsulationPort(): number {
    return this.socket.address().port;
  }

  readonly host: ForeignHost = {
    output: (packet) => {
      if (this.state === 'closed') return;
      this.counters.packetsOut++;
      this.socket.send(packet, this.remoteEncapsulationPort, this.remoteAddress, () => {});
    },
    established: (os, is) => {
      if (this.state !== 'cookie-wait') return;
      this.outboundStreams = os;
      this.inboundStreams = is;
      this.state = 'established';
      this.emit('established');
    },
    message: (m) => {
      if (this.state === 'closed') return;
      this.counters.messagesIn++;
      this.counters.bytesIn += m.data.length;
      if (this.isPaused) this.held.push(m);
      else this.emit('message', m);
    },
    sent: (bytes) => {
      this.bufferedAmount = Math.max(0, this.bufferedAmount - bytes);
      if (this.needDrain && this.bufferedAmount < this.engine.highWaterMark) {
        this.needDrain = false;
        this.emit('drain');
      }
    },
    closed: (reason, detail) => this.finish(reason, detail),
  };

  /** Runs a driver call, containing what it throws or rejects with: only this association fails. */
  contain(f: () => unknown): void {
    try {
      const r = f();
      if (r instanceof Promise) r.catch((err: unknown) => this.failed(err));
    } catch (err) {
      this.failed(err);
    }
  }

  private failed(err: unknown): void {
    this.engine.counters.exceptions++;
    const detail = String(err instanceof Error ? err.message : err).slice(0, 200);
    try {
      this.driver?.abort();
    } catch {
      // already broken: the association is dropped all the same.
    }
    this.finish('internal-error', JSON.stringify(detail));
  }

  finish(reason: SctpCloseReason, detail: string): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.closeInfo = {
      reason,
      detail,
      error: reason === 'shutdown' ? undefined : new SctpAssociationError(reason, detail),
      unsentBytes: this.bufferedAmount,
    };
    this.onGone();
    this.emit('close', this.closeInfo);
  }

  send(m: SctpOutboundMessage): boolean {
    if (this.state !== 'established') throw new SctpNotWritableError(this.state);
    this.bufferedAmount += m.data.length;
    this.counters.messagesOut++;
    this.counters.bytesOut += m.data.length;
    this.contain(() => this.driver?.send(m));
    if (this.bufferedAmount >= this.engine.highWaterMark) {
      this.needDrain = true;
      return false;
    }
    return true;
  }

  pause(): void {
    this.isPaused = true;
  }

  resume(): void {
    this.isPaused = false;
    while (!this.isPaused && this.held.length > 0 && this.state !== 'closed')
      this.emit('message', this.held.shift() as SctpMessage);
  }

  shutdown(): void {
    if (this.state === 'closed') return;
    this.state = 'shutdown-pending';
    this.contain(() => this.driver?.shutdown());
  }

  abort(reason = 'aborted by the user'): void {
    if (this.state === 'closed') return;
    this.contain(() => this.driver?.abort());
    this.finish('abort-local', reason);
  }

  /** A packet from the peer, through the guard when it is on. */
  input(packet: Buffer, port: number): void {
    this.counters.packetsIn++;
    this.remoteEncapsulationPort = port;
    this.contain(() => this.driver?.input(packet));
  }
}

class ForeignListener extends EventEmitter<SctpListenerEvents> implements SctpListener {
  readonly associations = new Map<string, ForeignAssociation>();
  constructor(
    readonly socket: Socket,
    readonly address: string,
    readonly port: number,
    readonly maxAssociations: number,
  ) {
    super();
  }
  get encapsulationPort(): number {
    return this.socket.address().port;
  }
  get associationCount(): number {
    return this.associations.size;
  }
  closed = false;
  async close(): Promise<void> {
    // No new associations; open ones stay up as with net.Server, the socket goes with the last.
    this.closed = true;
    if (this.associations.size === 0) closeSocket(this.socket);
    else for (const a of this.associations.values()) a.once('close', () => this.maybeClose());
  }
  private maybeClose(): void {
    if (this.associations.size === 0) closeSocket(this.socket);
  }
}

function closeSocket(s: Socket): void {
  try {
    s.close();
  } catch {
    // already closed
  }
}

function bind(address: string, port: number): Promise<Socket> {
  const s = createSocket({ type: isIPv6(address) ? 'udp6' : 'udp4' });
  return new Promise((resolve, reject) => {
    s.once('error', reject);
    s.bind(port, address, () => {
      s.off('error', reject);
      // As our engine asks: a burst of 64 KiB messages overflows the default 208 KiB (findings §1).
      try {
        s.setRecvBufferSize(4 << 20);
        s.setSendBufferSize(4 << 20);
      } catch {
        // capped by the kernel
      }
      s.on('error', () => {});
      resolve(s);
    });
  });
}

/** See the module comment. */
export class ForeignSctpEngine implements SctpEngine {
  readonly counters: ForeignEngineCounters = { refused: {}, exceptions: 0 };
  readonly highWaterMark: number;
  private readonly guard: boolean;
  private readonly live = new Set<ForeignAssociation>();
  private readonly sockets = new Set<Socket>();

  constructor(
    readonly stack: ForeignStack,
    options: ForeignEngineOptions = {},
  ) {
    this.guard = options.guard ?? true;
    this.highWaterMark = options.sendHighWaterMark ?? 1 << 20;
  }

  /** The guard: false (and counted) when the packet must not reach the stack. */
  private pass(packet: Buffer): boolean {
    if (!this.guard) return packet.length >= 12;
    const p = guardPacket(packet);
    if (p instanceof CodecError) {
      this.counters.refused[p.reason] = (this.counters.refused[p.reason] ?? 0) + 1;
      return false;
    }
    return true;
  }

  async listen(o: SctpListenOptions): Promise<SctpListener> {
    const socket = await bind(o.address, o.encapsulationPort ?? DEFAULT_ENCAPSULATION_PORT);
    this.sockets.add(socket);
    const port = o.port === 0 ? 5000 : o.port;
    const l = new ForeignListener(socket, o.address, port, o.maxAssociations ?? 1024);
    socket.on('message', (packet, rinfo) => {
      if (!this.pass(packet)) return;
      const src = packet.readUInt16BE(0);
      const dst = packet.readUInt16BE(2);
      const key = `${rinfo.address}|${rinfo.port}|${src}|${dst}`;
      let a = l.associations.get(key);
      if (a === undefined) {
        // Only an INIT for the listener's port creates an association.
        if (l.closed || dst !== port || packet[12] !== ChunkType.INIT) {
          this.counters.refused['out-of-the-blue'] =
            (this.counters.refused['out-of-the-blue'] ?? 0) + 1;
          return;
        }
        if (l.associations.size >= l.maxAssociations) {
          this.counters.refused['association-limit'] =
            (this.counters.refused['association-limit'] ?? 0) + 1;
          return;
        }
        const made = new ForeignAssociation(
          this,
          socket,
          o.address,
          port,
          rinfo.address,
          src,
          rinfo.port,
          () => {
            l.associations.delete(key);
            this.live.delete(made);
          },
        );
        a = made;
        l.associations.set(key, made);
        this.live.add(made);
        made.contain(() => {
          made.driver = this.stack.server(made.host, port, src);
        });
        if (made.state === 'closed') return;
        made.once('established', () => l.emit('association', made));
      }
      a.input(packet, rinfo.port);
    });
    return l;
  }

  async connect(o: SctpConnectOptions): Promise<SctpAssociation> {
    o.signal?.throwIfAborted();
    const localAddress = o.localAddress ?? (isIPv6(o.address) ? '::' : '0.0.0.0');
    // One connected-to-one-peer UDP socket per association: neither stack demultiplexes.
    const socket = await bind(localAddress, o.localEncapsulationPort ?? 0);
    this.sockets.add(socket);
    const localPort = o.localPort ?? 49152 + Math.floor(Math.random() * 16384);
    const a = new ForeignAssociation(
      this,
      socket,
      localAddress,
      localPort,
      o.address,
      o.port,
      o.encapsulationPort ?? DEFAULT_ENCAPSULATION_PORT,
      () => {
        this.live.delete(a);
        // Let the last packets (SHUTDOWN COMPLETE, ABORT) leave before the socket goes.
        setTimeout(() => {
          this.sockets.delete(socket);
          closeSocket(socket);
        }, 200).unref();
      },
    );
    this.live.add(a);
    socket.on('message', (packet, rinfo) => {
      if (rinfo.address !== o.address || !this.pass(packet)) return;
      a.input(packet, rinfo.port);
    });
    a.contain(() => {
      a.driver = this.stack.client(a.host, localPort, o.port);
    });
    const target = `${o.address}:${o.port}`;
    return new Promise<SctpAssociation>((resolve, reject) => {
      const onAbort = (): void => a.abort('connect aborted');
      o.signal?.addEventListener('abort', onAbort, { once: true });
      const onClose = (info: SctpCloseInfo): void => {
        o.signal?.removeEventListener('abort', onAbort);
        reject(o.signal?.aborted ? o.signal.reason : new SctpConnectError(target, info.detail));
      };
      if (a.closeInfo) {
        onClose(a.closeInfo);
        return;
      }
      a.once('close', onClose);
      a.once('established', () => {
        o.signal?.removeEventListener('abort', onAbort);
        a.off('close', onClose);
        resolve(a);
      });
    });
  }

  async close(): Promise<void> {
    for (const a of [...this.live]) a.abort('engine closed');
    for (const s of this.sockets) closeSocket(s);
    this.sockets.clear();
  }
}
