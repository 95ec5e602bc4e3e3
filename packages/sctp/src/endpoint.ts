/**
 * One local UDP socket speaking SCTP over UDP (RFC 6951) for every SCTP port on it: the guard
 * (checksum and chunk bounds before anything else reads the packet), the demultiplexer (by
 * verification tag, then by addresses and ports), the stateless INIT / COOKIE ECHO handling of the
 * listeners, and out-of-the-blue replies (RFC 9260 §8.4). An exception while one association
 * handles a packet aborts that association only.
 *
 * Longer than 400 lines because the guard, the demultiplexer, the stateless INIT / COOKIE ECHO
 * path and the OOTB rules all work on the same association maps, listeners and reply budget; each
 * is a few dozen lines and splitting them would expose those maps between files.
 */
import { randomBytes } from 'node:crypto';
import { isIPv6 } from 'node:net';
import { Association, type AssociationHost } from './association.js';
import { CauseCode, ChunkType, FLAG_T, type ParsedPacket, type RawChunk } from './chunk-types.js';
import {
  CodecError,
  decodeInit,
  encodeCause,
  PacketWriter,
  parsePacket,
  singleChunkPacket,
} from './codec.js';
import { CookieSigner } from './cookie.js';
import type { ResolvedAssociationOptions } from './options.js';
import type { SctpTimers } from './timers.js';

/** The datagram socket an endpoint runs on (node:dgram's Socket fits). */
export interface DatagramSocket {
  send(msg: Buffer, port: number, address: string, callback?: (err: Error | null) => void): void;
  close(callback?: () => void): void;
}

/** Counters of one endpoint (drops are per reason). */
export interface SctpEndpointCounters {
  datagramsIn: number;
  datagramsOut: number;
  sendErrors: number;
  /** Datagrams refused by the guard, by codec reason (`bad-checksum`, `bad-chunk-length`, ...). */
  refused: Record<string, number>;
  outOfTheBlue: number;
  initsAnswered: number;
  badCookies: number;
  staleCookies: number;
  associationsRefused: number;
  /** Exceptions contained (each aborted one association). */
  exceptions: number;
  /** OOTB / INIT ACK replies not sent because of the reply rate limit. */
  repliesLimited: number;
  /** Valid COOKIE ECHOs for an association that already existed and closed (replays, duplicates). */
  replayedCookies: number;
}

/** A listener registered on one SCTP port of an endpoint. */
export interface EndpointListener {
  readonly options: ResolvedAssociationOptions;
  readonly maxAssociations: number;
  /** Most associations from one peer IP address (all its ports); more are refused like the above. */
  readonly maxAssociationsPerAddress: number;
  associations: number;
  accept(a: Association): void;
}

/** Settings of an endpoint. */
export interface EndpointSettings {
  readonly timers: SctpTimers;
  /** Replies sent without an association (INIT ACK, OOTB ABORT) per second. Default 1000. */
  readonly replyRate?: number;
  /** Called for anything contained or refused, with a short escaped description. */
  readonly onWarning?: (message: string) => void;
  /** Called once the last listener and association are gone and the socket is closed. */
  readonly onIdle?: () => void;
  /**
   * How long an unused socket stays open, ms: it answers a late SHUTDOWN ACK of a closed
   * association (its SHUTDOWN COMPLETE was lost) and is reused by a new listener or connect. The
   * timer is unref'd. Default 3000.
   */
  readonly idleLingerMs?: number;
  /**
   * The socket checks the CRC32c of every datagram it delivers (reporting the bad ones through
   * {@link SctpEndpoint.refusedByTransport}) and writes it into every datagram sent: the C helper
   * of `udpIo: 'helper'` does both, so JavaScript does neither. Default false.
   */
  readonly checksumOffload?: boolean;
}

/** See the module comment. */
export class SctpEndpoint implements AssociationHost {
  readonly timers: SctpTimers;
  /** {@link AssociationHost.checksumOffload}: from the settings. */
  readonly checksumOffload: boolean;
  readonly counters: SctpEndpointCounters = {
    datagramsIn: 0,
    datagramsOut: 0,
    sendErrors: 0,
    refused: {},
    outOfTheBlue: 0,
    initsAnswered: 0,
    badCookies: 0,
    staleCookies: 0,
    associationsRefused: 0,
    exceptions: 0,
    repliesLimited: 0,
    replayedCookies: 0,
  };
  private readonly byTag = new Map<number, Association>();
  private readonly byTuple = new Map<string, Association>();
  private readonly portListeners = new Map<number, EndpointListener>();
  private readonly owner = new Map<Association, EndpointListener>();
  /** Associations accepted per (listening port, peer address), for `maxAssociationsPerAddress`. */
  private readonly perAddress = new Map<string, number>();
  private readonly signer = new CookieSigner();
  /**
   * Local tags of associations made from a cookie, remembered until their cookies expire, so a
   * cookie is good for one association. At most {@link MAX_USED_COOKIE_TAGS}; the oldest go first.
   */
  private readonly usedCookieTags = new Map<number, number>();
  private readonly replyRate: number;
  private tokens: number;
  private tokensAt: number;
  private refs = 0;
  private closed = false;
  private closing: Promise<void> | undefined;
  private refusedReportedAt = Number.NEGATIVE_INFINITY;
  private refusedUnreported = 0;
  private idleCheck: ReturnType<typeof setTimeout> | undefined;
  private readonly onSendDone = (err: Error | null): void => {
    if (err) this.counters.sendErrors++;
  };

  constructor(
    private readonly socket: DatagramSocket,
    readonly localAddress: string,
    readonly localEncapsulationPort: number,
    private readonly settings: EndpointSettings,
  ) {
    this.timers = settings.timers;
    this.checksumOffload = settings.checksumOffload === true;
    this.replyRate = settings.replyRate ?? 1000;
    this.tokens = this.replyRate;
    this.tokensAt = this.timers.now();
  }

  /** Associations alive on this endpoint. */
  get associationCount(): number {
    return this.byTag.size;
  }

  /** Takes a reference (a listener or an association uses the socket). */
  retain(): void {
    this.refs++;
    if (this.idleCheck !== undefined) {
      clearTimeout(this.idleCheck);
      this.idleCheck = undefined;
    }
  }

  /** Drops a reference; the endpoint closes its socket when none is left. */
  release(): void {
    if (--this.refs > 0 || this.closed || this.idleCheck !== undefined) return;
    // Deferred: the last packets are still on their way out, and a peer whose SHUTDOWN COMPLETE
    // was lost retransmits its SHUTDOWN ACK, to be answered out of the blue.
    this.idleCheck = setTimeout(() => {
      this.idleCheck = undefined;
      if (this.refs > 0 || this.closed) return;
      this.settings.onIdle?.();
      void this.close();
    }, this.settings.idleLingerMs ?? 3000);
    this.idleCheck.unref?.();
  }

  /** Registers a listener on an SCTP port; false when the port already has one. */
  addPortListener(port: number, l: EndpointListener): boolean {
    if (this.portListeners.has(port)) return false;
    this.portListeners.set(port, l);
    this.retain();
    return true;
  }

  /** Unregisters a listener; its associations stay up. */
  removePortListener(port: number, l: EndpointListener): void {
    if (this.portListeners.get(port) !== l) return;
    this.portListeners.delete(port);
    this.release();
  }

  /** True when `port` is used by a listener or by an association to `remote`. */
  portInUse(port: number): boolean {
    if (this.portListeners.has(port)) return true;
    for (const a of this.byTag.values()) if (a.localPort === port) return true;
    return false;
  }

  /** Starts an association (INIT sent). */
  connect(
    options: ResolvedAssociationOptions,
    remoteAddress: string,
    remotePort: number,
    remoteEncapsulationPort: number,
    localPort: number,
  ): Association {
    const a = new Association({
      host: this,
      options,
      overhead: overheadFor(remoteAddress),
      localAddress: this.localAddress,
      localPort,
      localEncapsulationPort: this.localEncapsulationPort,
      remoteAddress,
      remotePort,
      remoteEncapsulationPort,
      localTag: this.newTag(),
      localInitialTsn: random32(),
    });
    this.register(a);
    a.startInit();
    return a;
  }

  private register(a: Association): void {
    this.byTag.set(a.localTag, a);
    this.byTuple.set(tupleKey(a.remoteAddress, a.remotePort, a.localPort), a);
    this.retain();
  }

  /** {@link AssociationHost}: sends an association's packet to its peer's current UDP port. */
  transmit(a: Association, packet: Buffer, bulk?: boolean): void {
    this.sendRaw(packet, a.remoteEncapsulationPort, a.remoteAddress, bulk);
  }

  /** {@link AssociationHost}: forgets a closed association. */
  released(a: Association): void {
    if (this.byTag.get(a.localTag) !== a) return;
    this.byTag.delete(a.localTag);
    const key = tupleKey(a.remoteAddress, a.remotePort, a.localPort);
    if (this.byTuple.get(key) === a) this.byTuple.delete(key);
    const l = this.owner.get(a);
    if (l) {
      l.associations--;
      this.owner.delete(a);
      const k = addressKey(a.localPort, a.remoteAddress);
      const n = (this.perAddress.get(k) ?? 1) - 1;
      if (n > 0) this.perAddress.set(k, n);
      else this.perAddress.delete(k);
    }
    this.release();
  }

  private sendRaw(packet: Buffer, port: number, address: string, bulk?: boolean): void {
    if (this.closed) return;
    this.counters.datagramsOut++;
    try {
      if (bulk) this.socket.send(packet, port, address);
      else this.socket.send(packet, port, address, this.onSendDone);
    } catch {
      this.counters.sendErrors++;
    }
  }

  /** The guard and demultiplexer: one datagram in. Never throws. */
  receive(msg: Buffer, address: string, port: number): void {
    if (this.closed) return;
    this.counters.datagramsIn++;
    const p = parsePacket(msg, this.checksumOffload);
    if (p instanceof CodecError) {
      this.refuse(p.reason, p.detail, msg, address, port);
      return;
    }
    const a = this.byTag.get(p.vtag);
    if (
      a !== undefined &&
      a.remoteAddress === address &&
      a.remotePort === p.srcPort &&
      a.localPort === p.dstPort
    ) {
      this.dispatch(a, p, port);
      return;
    }
    try {
      this.outOfTheBlue(p, address, port);
    } catch (err) {
      this.counters.exceptions++;
      this.warn(`SCTP packet from ${address}:${port} failed: ${describe(err)}`);
    }
  }

  /**
   * Datagrams the transport refused before they reached {@link receive} (the helper's bad
   * checksums: `count` of them, `head` the first one's first bytes, from `address`:`port`):
   * counted and reported as the guard's own refusals are.
   */
  refusedByTransport(
    reason: string,
    detail: string,
    count: number,
    head: Buffer,
    address: string,
    port: number,
  ): void {
    if (this.closed || count <= 0) return;
    this.counters.datagramsIn += count;
    this.counters.refused[reason] = (this.counters.refused[reason] ?? 0) + count - 1;
    this.refusedUnreported += count - 1;
    this.refuse(reason, detail, head, address, port);
  }

  private dispatch(a: Association, p: ParsedPacket, port: number): void {
    try {
      a.handle(p, port);
    } catch (err) {
      this.counters.exceptions++;
      this.warn(
        `SCTP association ${a.remoteAddress}:${a.remotePort} aborted after an internal error: ${describe(err)}`,
      );
      try {
        a.fail('internal-error', describe(err));
      } catch {
        a.finish('internal-error', describe(err));
      }
    }
  }

  /**
   * Counts a refused datagram and reports one a second (with how many more there were), its first
   * bytes in hex: a flood of bad packets costs a counter each, not a log line or a string each.
   */
  private refuse(
    reason: string,
    detail: string,
    msg: Buffer | undefined,
    address: string,
    port: number,
  ): void {
    this.counters.refused[reason] = (this.counters.refused[reason] ?? 0) + 1;
    if (this.settings.onWarning === undefined) return;
    const now = this.timers.now();
    if (now - this.refusedReportedAt < 1000) {
      this.refusedUnreported++;
      return;
    }
    this.refusedReportedAt = now;
    const more = this.refusedUnreported;
    this.refusedUnreported = 0;
    const head = msg ? `, first bytes ${msg.subarray(0, 16).toString('hex')}` : '';
    this.warn(
      `SCTP datagram from ${address}:${port} refused: ${reason} (${detail.slice(0, 80)})${head}` +
        (more > 0 ? `; ${more} more refused since the last report` : ''),
    );
  }

  private outOfTheBlue(p: ParsedPacket, address: string, port: number): void {
    const first = p.chunks[0] as RawChunk;
    if (first.type === ChunkType.INIT) {
      this.onInit(p, first, address, port);
      return;
    }
    if (first.type === ChunkType.COOKIE_ECHO) {
      this.onCookieEcho(p, first, address, port);
      return;
    }
    // A T-bit ABORT or SHUTDOWN COMPLETE carries the tag the association sends with.
    if (
      (first.type === ChunkType.ABORT || first.type === ChunkType.SHUTDOWN_COMPLETE) &&
      (first.flags & FLAG_T) !== 0
    ) {
      const a = this.byTuple.get(tupleKey(address, p.srcPort, p.dstPort));
      if (a !== undefined && a.peerTag === p.vtag) {
        this.dispatch(a, p, port);
        return;
      }
    }
    this.counters.outOfTheBlue++;
    for (const c of p.chunks) {
      if (c.type === ChunkType.ABORT || c.type === ChunkType.SHUTDOWN_COMPLETE) return;
      // §8.4 (7): a COOKIE ACK or an ERROR (a Stale Cookie among them) out of the blue is dropped.
      if (c.type === ChunkType.ERROR || c.type === ChunkType.INIT) return;
      if (c.type === ChunkType.COOKIE_ACK) return;
    }
    if (first.type === ChunkType.SHUTDOWN_ACK) {
      this.reply(
        singleChunkPacket(p.dstPort, p.srcPort, p.vtag, ChunkType.SHUTDOWN_COMPLETE, FLAG_T),
        port,
        address,
      );
      return;
    }
    this.reply(
      singleChunkPacket(p.dstPort, p.srcPort, p.vtag, ChunkType.ABORT, FLAG_T),
      port,
      address,
    );
  }

  private onInit(p: ParsedPacket, c: RawChunk, address: string, port: number): void {
    if (p.vtag !== 0 || p.chunks.length !== 1) {
      this.refuse(
        'bad-init-packet',
        'INIT bundled or with a non-zero tag',
        undefined,
        address,
        port,
      );
      return;
    }
    const init = decodeInit(c);
    if (init instanceof CodecError) {
      this.refuse(init.reason, init.detail, undefined, address, port);
      return;
    }
    const l = this.portListeners.get(p.dstPort);
    if (l === undefined) {
      this.counters.outOfTheBlue++;
      this.reply(
        singleChunkPacket(p.dstPort, p.srcPort, init.initiateTag, ChunkType.ABORT, 0),
        port,
        address,
      );
      return;
    }
    const o = l.options;
    const localTag = this.newTag();
    const localInitialTsn = random32();
    const cookie = this.signer.sign(
      {
        createdAt: Date.now(),
        localTag,
        peerTag: init.initiateTag,
        localInitialTsn,
        peerInitialTsn: init.initialTsn,
        peerRwnd: init.aRwnd,
        outboundStreams: Math.min(o.outboundStreams, init.inboundStreams),
        inboundStreams: Math.min(o.inboundStreams, init.outboundStreams),
        localPort: p.dstPort,
        peerPort: p.srcPort,
      },
      address,
    );
    const w = new PacketWriter(256, p.dstPort, p.srcPort, init.initiateTag);
    w.init(
      ChunkType.INIT_ACK,
      {
        initiateTag: localTag,
        aRwnd: o.receiveWindow,
        outboundStreams: o.outboundStreams,
        inboundStreams: o.inboundStreams,
        initialTsn: localInitialTsn,
      },
      cookie,
    );
    if (this.reply(w.finish(), port, address)) this.counters.initsAnswered++;
  }

  private onCookieEcho(p: ParsedPacket, c: RawChunk, address: string, port: number): void {
    const l = this.portListeners.get(p.dstPort);
    if (l === undefined) {
      this.counters.outOfTheBlue++;
      this.reply(
        singleChunkPacket(p.dstPort, p.srcPort, p.vtag, ChunkType.ABORT, FLAG_T),
        port,
        address,
      );
      return;
    }
    const v = this.signer.verify(c.value, address, Date.now(), l.options.cookieLifetime);
    if (v === 'bad-cookie') {
      this.counters.badCookies++;
      return;
    }
    if (typeof v === 'object' && 'staleByMs' in v) {
      // §5.2.6: tell the peer (its tag is in the cookie, whose MAC was good) so that its connect
      // fails now instead of after every COOKIE ECHO retransmission.
      this.counters.staleCookies++;
      if (v.contents.localTag === p.vtag && v.contents.peerPort === p.srcPort) {
        const staleness = Buffer.alloc(4);
        staleness.writeUInt32BE(Math.min(0xffffffff, Math.round(v.staleByMs * 1000)) >>> 0, 0);
        this.reply(
          singleChunkPacket(
            p.dstPort,
            p.srcPort,
            v.contents.peerTag,
            ChunkType.ERROR,
            0,
            encodeCause(CauseCode.STALE_COOKIE, staleness),
          ),
          port,
          address,
        );
      }
      return;
    }
    if (
      v.localTag !== p.vtag ||
      v.localPort !== p.dstPort ||
      v.peerPort !== p.srcPort ||
      this.byTag.has(v.localTag)
    ) {
      this.counters.badCookies++;
      return;
    }
    if (this.usedCookieTags.has(v.localTag)) {
      // The association this cookie made has closed; a copy (a delayed duplicate or a replay)
      // must not bring it back within the cookie's lifetime.
      this.counters.replayedCookies++;
      return;
    }
    const old = this.byTuple.get(tupleKey(address, p.srcPort, p.dstPort));
    if (old !== undefined)
      old.finish('restart', 'the peer set up a new association on the same ports');
    const fromAddress = this.perAddress.get(addressKey(p.dstPort, address)) ?? 0;
    const perAddressLimit = l.maxAssociationsPerAddress;
    if (l.associations >= l.maxAssociations || fromAddress >= perAddressLimit) {
      this.counters.associationsRefused++;
      this.warn(
        l.associations >= l.maxAssociations
          ? `SCTP association from ${address}:${p.srcPort} refused: ${l.maxAssociations} associations on port ${p.dstPort}`
          : `SCTP association from ${address}:${p.srcPort} refused: ${perAddressLimit} associations from that address on port ${p.dstPort}`,
      );
      const w = new PacketWriter(64, p.dstPort, p.srcPort, v.peerTag);
      w.raw(ChunkType.ABORT, 0, encodeCause(CauseCode.OUT_OF_RESOURCE));
      this.reply(w.finish(), port, address);
      return;
    }
    const a = new Association({
      host: this,
      options: l.options,
      overhead: overheadFor(address),
      localAddress: this.localAddress,
      localPort: p.dstPort,
      localEncapsulationPort: this.localEncapsulationPort,
      remoteAddress: address,
      remotePort: p.srcPort,
      remoteEncapsulationPort: port,
      localTag: v.localTag,
      localInitialTsn: v.localInitialTsn,
      peer: {
        peerTag: v.peerTag,
        peerInitialTsn: v.peerInitialTsn,
        peerRwnd: v.peerRwnd,
        outboundStreams: v.outboundStreams,
        inboundStreams: v.inboundStreams,
      },
    });
    this.register(a);
    this.rememberCookieTag(v.localTag, v.createdAt + l.options.cookieLifetime);
    l.associations++;
    this.owner.set(a, l);
    this.perAddress.set(addressKey(p.dstPort, address), fromAddress + 1);
    try {
      l.accept(a);
    } catch (err) {
      this.counters.exceptions++;
      this.warn(`SCTP listener on port ${p.dstPort} threw: ${describe(err)}`);
      a.fail('internal-error', describe(err));
      return;
    }
    // The COOKIE ECHO in `p` makes the association answer COOKIE ACK; bundled DATA follows.
    this.dispatch(a, p, port);
  }

  private rememberCookieTag(tag: number, expiresAt: number): void {
    const used = this.usedCookieTags;
    const now = Date.now();
    // Insertion order is creation order: drop the expired (and, past the cap, the oldest) first.
    for (const [t, exp] of used) {
      if (exp > now && used.size < MAX_USED_COOKIE_TAGS) break;
      used.delete(t);
    }
    used.set(tag, expiresAt);
  }

  /** Sends a reply made without an association, within the reply rate. */
  private reply(packet: Buffer, port: number, address: string): boolean {
    const now = this.timers.now();
    this.tokens = Math.min(
      this.replyRate,
      this.tokens + ((now - this.tokensAt) * this.replyRate) / 1000,
    );
    this.tokensAt = now;
    if (this.tokens < 1) {
      this.counters.repliesLimited++;
      return false;
    }
    this.tokens--;
    this.sendRaw(packet, port, address);
    return true;
  }

  private newTag(): number {
    for (;;) {
      const t = random32();
      if (t !== 0 && !this.byTag.has(t)) return t;
    }
  }

  private warn(message: string): void {
    this.settings.onWarning?.(message);
  }

  /** Aborts every association (their ABORTs still go out) and closes the socket. */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    if (this.idleCheck !== undefined) clearTimeout(this.idleCheck);
    for (const a of [...this.byTag.values()]) a.abort('endpoint closed');
    this.portListeners.clear();
    this.closing = new Promise<void>((resolve) => {
      setImmediate(() => {
        this.closed = true;
        try {
          this.socket.close(() => resolve());
        } catch {
          resolve();
        }
      });
    });
    return this.closing;
  }
}

/**
 * Most cookie tags remembered against replay (16 bytes each in a Map): beyond it the oldest are
 * forgotten early, so a replay of a cookie older than the last 65 536 associations is not caught.
 */
export const MAX_USED_COOKIE_TAGS = 65_536;

/** IP + UDP header bytes for a peer address. */
export function overheadFor(address: string): number {
  return isIPv6(address) ? 48 : 28;
}

function addressKey(localPort: number, address: string): string {
  return `${localPort}|${address}`;
}

function tupleKey(address: string, remotePort: number, localPort: number): string {
  return `${address}|${remotePort}|${localPort}`;
}

let pool = Buffer.alloc(0);
let poolOff = 0;
/** A random 32-bit number (tags, initial TSNs), from a refilled pool of crypto randomness. */
export function random32(): number {
  if (poolOff + 4 > pool.length) {
    pool = randomBytes(1024);
    poolOff = 0;
  }
  const v = pool.readUInt32BE(poolOff);
  poolOff += 4;
  return v;
}

/** A short, escaped description of a thrown value, for logs. */
export function describe(err: unknown): string {
  const s = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return JSON.stringify(s.length > 200 ? `${s.slice(0, 200)}...` : s);
}
