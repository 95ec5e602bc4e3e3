/**
 * `udpIo: 'helper'`: the UDP sockets of the RFC 6951 transport live in a small C program,
 * `native/sctp-udp-helper.c` (compiled on first use with the system C compiler, or a prebuilt
 * binary given as `helperPath`), which moves datagrams with recvmmsg / sendmmsg in batches of up to
 * 64 and frames them to and from Node over its stdin / stdout. Node 20's dgram costs one JavaScript
 * callback, one Buffer and one system call per datagram (the proxy's floor, docs/sctp.md "Third
 * pass"); here one pipe read carries dozens of datagrams, and the datagrams one event-loop turn
 * sends leave in one write. The helper checks the CRC32c of what it receives (bad ones are counted
 * and reported, as the guard does) and writes it into what it sends, so JavaScript does neither.
 * Everything else of SCTP (bounds, demultiplexing, associations) stays in TypeScript.
 *
 * Supervision: the helper exits when its stdin closes or Node dies (PR_SET_PDEATHSIG). When it dies
 * otherwise, a new one starts (after 100 ms, doubling up to 5 s while it keeps dying) and every
 * open socket is bound again to its address and port (and connected again), so associations carry
 * on through their retransmissions; a socket that cannot be bound again, or every socket when the
 * helper cannot be started, is lost: its endpoint closes and its associations end.
 */
import { spawn } from 'node:child_process';
import { isIPv4 } from 'node:net';
import { fileURLToPath } from 'node:url';
import { buildNativeHelper } from '@userspace-proxy/core/sockets';
import { SctpError } from './errors.js';
import { errnoName } from './transport-raw-helper.js';
import type {
  UdpSocketEvents,
  UdpSocketHandle,
  UdpSocketOpenOptions,
  UdpSocketProvider,
} from './transport-udp.js';
import {
  type HelperOwner,
  HelperProcess,
  HelperSocket,
  SctpUdpHelperError,
  type UdpHelperCounters,
} from './transport-udp-helper-process.js';

export { SctpUdpHelperError, type UdpHelperCounters } from './transport-udp-helper-process.js';

/** The helper could not bind (or connect) one UDP socket: `errno` names why (EADDRINUSE, ...). */
export class SctpUdpSocketError extends SctpError {
  readonly errno: string;
  constructor(what: string, errno: string) {
    super('ERR_SCTP_UDP_SOCKET', `${what}: ${errno}`);
    this.errno = errno;
  }
}

/** How the UDP helper is found, run and bounded. */
export interface UdpHelperOptions {
  /** A prebuilt helper binary. Default: `native/sctp-udp-helper.c` compiled into `native/build/`. */
  readonly helperPath?: string;
  /** C compiler used for the on-demand build. Default `cc`. */
  readonly compiler?: string;
  /**
   * Bytes queued to the helper's stdin (written, not yet taken by the helper) beyond which
   * datagrams are dropped, as a full UDP socket drops them (`counters.sendDropped`). Default 4 MiB.
   */
  readonly maxQueuedBytes?: number;
  /** How long the helper may take to start and say hello, ms. Default 10000. */
  readonly startTimeoutMs?: number;
  /** First restart delay after the helper died, ms, doubling up to 5 s. Default 100. */
  readonly restartBackoffMs?: number;
  /**
   * UDP GSO (Linux >= 4.18): a run of datagrams of one socket to one destination, all one size
   * but the last, leaves in one sendmsg with a UDP_SEGMENT cmsg, so the kernel's per-packet IP and
   * device work is done once per run (docs/sctp.md, "Fifth pass"). A socket whose GSO send the
   * kernel refuses sends without it from then on (counted, warned once). Default true.
   */
  readonly gso?: boolean;
  /**
   * UDP GRO (Linux >= 5.0): sockets accept datagrams coalesced by the kernel (a GSO sender's run
   * on loopback arrives whole) and the helper splits them at the segment size. Default true.
   */
  readonly gro?: boolean;
  /** Receives the helper's deaths and restarts (already short and escaped). */
  readonly onWarning?: (message: string) => void;
}

const SOURCE = fileURLToPath(new URL('../native/sctp-udp-helper.c', import.meta.url));
const HELPER_VERSION = 2;
const MAX_RESTART_DELAY_MS = 5000;
/**
 * A helper that stayed up this long starts the restart back-off over when it dies (as the native
 * helpers' HELPER_RESTART_RESET_MS): one that crashes soon after every start backs off to 5 s.
 */
const RESTART_RESET_MS = 30_000;

/**
 * Compiles the helper once per source version (core's {@link buildNativeHelper}); a missing
 * compiler becomes an error that names the ways out.
 */
export function buildUdpHelper(compiler = 'cc'): Promise<string> {
  return buildNativeHelper({
    source: SOURCE,
    outDir: fileURLToPath(new URL('../native/build/', import.meta.url)),
    name: 'sctp-udp-helper',
    compiler,
  }).catch((cause: unknown) => {
    const msg = cause instanceof Error ? cause.message : String(cause);
    throw new SctpUdpHelperError(
      `${msg.slice(0, 400)}; install a C compiler (Debian: apt-get install gcc libc6-dev), ` +
        `give udpHelper.helperPath a prebuilt binary, or use udpIo: 'node'`,
      { cause },
    );
  });
}

/**
 * The provider of `udpIo: 'helper'` (see the module comment): one helper process for every socket
 * of one engine, started on the first open.
 */
export class HelperUdpSockets implements UdpSocketProvider, HelperOwner {
  readonly checksumOffload = true;
  readonly counters: UdpHelperCounters = {
    packetsIn: 0,
    packetsOut: 0,
    badChecksums: 0,
    sendErrors: 0,
    sendDropped: 0,
    starts: 0,
    deaths: 0,
    gsoSends: 0,
    gsoSegments: 0,
    gsoRefused: 0,
    groReads: 0,
    groSegments: 0,
  };
  /** The first GSO refusal is warned about; the later ones are counted only. */
  private gsoWarned = false;
  /** Open sockets by their current helper handle. */
  readonly byHandle = new Map<number, HelperSocket>();
  private readonly sockets = new Set<HelperSocket>();
  private current: HelperProcess | undefined;
  private starting: Promise<HelperProcess> | undefined;
  private readonly stopping = new Set<HelperProcess>();
  private restartTimer: ReturnType<typeof setTimeout> | undefined;
  private restartDelay: number;
  /** When the current (or last) helper started, on the monotonic clock. */
  private startedAt = 0;
  /** Bumped by {@link close}: a start or restart begun before it gives up. */
  private epoch = 0;
  /** Binary IPv4 of recent destination addresses (cleared past 1 024 entries). */
  private readonly v4 = new Map<string, number>();

  constructor(private readonly o: UdpHelperOptions = {}) {
    this.restartDelay = o.restartBackoffMs ?? 100;
  }

  /** The running helper's pid (for its CPU time in /proc), or undefined. */
  get pid(): number | undefined {
    return this.current?.child.pid;
  }

  /** Starts the helper now (the first open does anyway): a missing compiler shows at once. */
  async start(): Promise<void> {
    await this.ensure();
  }

  private ensure(): Promise<HelperProcess> {
    if (this.current !== undefined && !this.current.exited) return Promise.resolve(this.current);
    this.starting ??= this.spawn().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  private async spawn(): Promise<HelperProcess> {
    const epoch = this.epoch;
    const path = this.o.helperPath ?? (await buildUdpHelper(this.o.compiler));
    const args = [
      ...(this.o.gso === false ? ['--no-gso'] : []),
      ...(this.o.gro === false ? ['--no-gro'] : []),
    ];
    const child = spawn(path, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const h = new HelperProcess(child, this);
    let version: number;
    try {
      version = await h.hello(this.o.startTimeoutMs ?? 10_000);
    } catch (err) {
      h.stop();
      throw err;
    }
    if (version !== HELPER_VERSION) {
      this.stopping.add(h);
      h.stop();
      throw new SctpUdpHelperError(
        version < 0
          ? `exited before its hello: ${h.stderrTail}`
          : `speaks version ${version}, not ${HELPER_VERSION}: a stale build`,
      );
    }
    if (this.epoch !== epoch) {
      this.stopping.add(h);
      h.stop();
      throw new SctpUdpHelperError('closed while starting');
    }
    this.counters.starts++;
    this.current = h;
    this.startedAt = performance.now();
    return h;
  }

  async open(o: UdpSocketOpenOptions, events: UdpSocketEvents): Promise<UdpSocketHandle> {
    const h = await this.ensure();
    const s = new HelperSocket(this, o.address, o.port, o.connect, o.bufferBytes, events);
    const r = await h.bind(s, o.port);
    if (r.err !== 0) {
      const what = `UDP socket on ${o.address}:${o.port}`;
      if (r.err < 0) throw new SctpUdpHelperError(`exited while binding a ${what}`);
      throw new SctpUdpSocketError(
        `${what}${o.connect ? ` to ${o.connect.address}:${o.connect.port}` : ''}`,
        errnoName(r.err),
      );
    }
    s.handle = r.handle;
    s.port = r.port;
    this.sockets.add(s);
    this.byHandle.set(r.handle, s);
    return s;
  }

  /** Queues one datagram for the helper (it writes the checksum). Never throws. */
  send(s: HelperSocket, msg: Buffer, port: number, address: string): void {
    const h = this.current;
    if (s.closed || s.handle === 0 || h === undefined || h.exited) {
      this.counters.sendDropped++;
      return;
    }
    if (h.backlog > (this.o.maxQueuedBytes ?? 4 << 20)) {
      this.counters.sendDropped++;
      return;
    }
    let v4: number | undefined;
    let text: Buffer | undefined;
    let alen = 0;
    if (s.connect === undefined) {
      v4 = this.v4.get(address);
      if (v4 === undefined && isIPv4(address)) {
        const q = address.split('.');
        v4 =
          ((Number(q[0]) << 24) | (Number(q[1]) << 16) | (Number(q[2]) << 8) | Number(q[3])) >>> 0;
        if (this.v4.size >= 1024) this.v4.clear();
        this.v4.set(address, v4);
      }
      if (v4 !== undefined) alen = 4;
      else {
        text = Buffer.from(address, 'latin1');
        alen = text.length;
      }
    }
    const f = h.frame(0x53, 7 + alen + msg.length); // 'S'
    if (f === undefined) {
      this.counters.sendDropped++;
      return;
    }
    const [b, at] = f;
    b.writeUInt32BE(s.handle, at);
    b.writeUInt16BE(port, at + 4);
    if (v4 !== undefined) {
      b[at + 6] = 4;
      b.writeUInt32BE(v4, at + 7);
    } else if (text !== undefined) {
      b[at + 6] = 0x80 | text.length;
      text.copy(b, at + 7);
    } else b[at + 6] = 0;
    msg.copy(b, at + 7 + alen);
    this.counters.packetsOut++;
  }

  closeSocket(s: HelperSocket): void {
    if (s.closed) return;
    s.closed = true;
    this.sockets.delete(s);
    if (s.handle !== 0) {
      this.byHandle.delete(s.handle);
      const h = this.current;
      if (h !== undefined && !h.exited) h.closeHandle(s.handle);
    }
  }

  /** {@link HelperOwner.gsoRefused}: counted, warned about once per engine. */
  gsoRefused(count: number, errno: number): void {
    this.counters.gsoRefused += count;
    if (this.gsoWarned) return;
    this.gsoWarned = true;
    this.o.onWarning?.(
      `SCTP UDP helper: the kernel refused a UDP GSO send (${errnoName(errno)}); ` +
        'that socket sends datagram by datagram from now on',
    );
  }

  /** A helper process ended: on purpose (nothing to do), or it died (restart, bind again). */
  exited(h: HelperProcess, why: string): void {
    if (this.stopping.delete(h)) return;
    if (this.current !== h) return;
    this.current = undefined;
    this.counters.deaths++;
    for (const s of this.sockets) {
      this.byHandle.delete(s.handle);
      s.handle = 0;
    }
    if (this.sockets.size === 0) return;
    if (performance.now() - this.startedAt >= RESTART_RESET_MS) {
      this.restartDelay = this.o.restartBackoffMs ?? 100;
    }
    const delay = this.restartDelay;
    this.restartDelay = Math.min(MAX_RESTART_DELAY_MS, delay * 2);
    this.o.onWarning?.(
      `SCTP UDP helper ${why}; starting a new one in ${delay} ms for ${this.sockets.size} socket(s)`,
    );
    clearTimeout(this.restartTimer);
    this.restartTimer = setTimeout(() => void this.restart(), delay);
    this.restartTimer.unref?.();
  }

  private async restart(): Promise<void> {
    if (this.sockets.size === 0) return;
    let h: HelperProcess;
    try {
      h = await this.ensure();
    } catch (err) {
      const why = `a new helper could not start: ${err instanceof Error ? err.message : String(err)}`;
      for (const s of [...this.sockets]) this.lose(s, why);
      return;
    }
    for (const s of [...this.sockets]) {
      const r = await h.bind(s, s.port);
      if (s.closed) {
        if (r.err === 0) h.closeHandle(r.handle);
        continue;
      }
      if (r.err < 0) return; // died again: its exit schedules the next try
      if (r.err !== 0) {
        this.lose(s, `binding ${s.address}:${s.port} again failed: ${errnoName(r.err)}`);
        continue;
      }
      s.handle = r.handle;
      this.byHandle.set(r.handle, s);
    }
  }

  private lose(s: HelperSocket, why: string): void {
    this.closeSocket(s);
    s.events.onLost?.(why);
  }

  /**
   * Stops the helper (the engine closed its endpoints first); a later open starts a new one, as
   * node:dgram sockets open again after an engine's close.
   */
  async close(): Promise<void> {
    this.epoch++;
    clearTimeout(this.restartTimer);
    for (const s of [...this.sockets]) this.closeSocket(s);
    await this.starting?.catch(() => undefined);
    const h = this.current;
    this.current = undefined;
    if (h === undefined || h.exited) return;
    this.stopping.add(h);
    await new Promise<void>((resolve) => {
      h.child.once('exit', () => resolve());
      h.stop();
    });
  }
}
