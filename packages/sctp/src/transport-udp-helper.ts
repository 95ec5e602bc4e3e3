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
import { type ChildProcess, spawn } from 'node:child_process';
import { isIPv4 } from 'node:net';
import { constants } from 'node:os';
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

/** The UDP helper could not be built, started, or answered wrongly: `detail` says which and the fix. */
export class SctpUdpHelperError extends SctpError {
  constructor(detail: string, options?: { cause?: unknown }) {
    super('ERR_SCTP_UDP_HELPER', `SCTP UDP helper (udpIo: 'helper'): ${detail}`, options);
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
  /** Receives the helper's deaths and restarts (already short and escaped). */
  readonly onWarning?: (message: string) => void;
}

/** Counters of the UDP helper, over every helper process the provider ran. */
export interface UdpHelperCounters {
  /** Datagrams handed to Node (checksum right). */
  packetsIn: number;
  /** Datagrams handed to the helper. */
  packetsOut: number;
  /** Datagrams the helper refused for a bad CRC32c (also in each endpoint's `refused`). */
  badChecksums: number;
  /** Sends the helper reported failed (sendmmsg errors: a full socket buffer, ECONNREFUSED). */
  sendErrors: number;
  /** Datagrams not handed over: the stdin backlog was past `maxQueuedBytes`, or no helper ran. */
  sendDropped: number;
  /** Helper processes started. */
  starts: number;
  /** Helper processes that died (not stopped by us). */
  deaths: number;
}

const EMPTY = Buffer.alloc(0);
const SOURCE = fileURLToPath(new URL('../native/sctp-udp-helper.c', import.meta.url));
const HELPER_VERSION = 1;
const MAX_RESTART_DELAY_MS = 5000;
/** Bytes of the buffer frames to the helper are written into; one write per turn takes a slice. */
const OUT_CHUNK = 256 * 1024;
/** The largest frame the helper accepts (its MAX_FRAME): a datagram of up to 65 536 bytes. */
const MAX_FRAME = 65536 + 64;

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

/** One socket as Node sees it; its helper handle changes when a restarted helper binds it again. */
class HelperSocket implements UdpSocketHandle {
  handle = 0;
  closed = false;
  /** Last source address and its text, for the datagrams of one peer (most of them). */
  srcKey = -1;
  srcText = '';
  constructor(
    readonly provider: HelperUdpSockets,
    readonly address: string,
    public port: number,
    readonly connect: { readonly address: string; readonly port: number } | undefined,
    readonly bufferBytes: number,
    readonly events: UdpSocketEvents,
  ) {}

  send(msg: Buffer, port: number, address: string, callback?: (err: Error | null) => void): void {
    this.provider.send(this, msg, port, address);
    callback?.(null);
  }

  close(callback?: () => void): void {
    this.provider.closeSocket(this);
    if (callback) setImmediate(callback);
  }
}

/** One helper process. */
class HelperProcess {
  exited = false;
  private carry: Buffer = EMPTY;
  private stderr = '';
  private nextReq = 1;
  private readonly binds = new Map<number, (err: number, handle: number, port: number) => void>();
  private onHello: ((version: number) => void) | undefined;
  private out: Buffer = Buffer.allocUnsafeSlow(OUT_CHUNK);
  private outStart = 0;
  private outOff = 0;
  private flushQueued = false;
  private readonly flushBound = (): void => this.flush();

  constructor(
    readonly child: ChildProcess,
    private readonly owner: HelperUdpSockets,
  ) {
    child.stdout?.on('data', (chunk: Buffer) => this.onData(chunk));
    child.stderr?.on('data', (chunk: Buffer) => {
      this.stderr = (this.stderr + chunk.toString()).slice(-2000);
    });
    // A dying helper fails pending writes: 'exit' reports it, never an unhandled 'error'.
    child.on('error', () => undefined);
    child.stdin?.on('error', () => undefined);
    child.stdout?.on('error', () => undefined);
    child.once('exit', (code, signal) => {
      this.exited = true;
      this.onHello?.(-1);
      for (const done of this.binds.values()) done(-1, 0, 0);
      this.binds.clear();
      const tail = this.stderr ? `: ${JSON.stringify(this.stderr.slice(-300))}` : '';
      owner.exited(this, `exited (${signal ?? code})${tail}`);
    });
  }

  get stderrTail(): string {
    return this.stderr.slice(-300);
  }

  hello(timeoutMs: number): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.child.kill('SIGKILL');
        reject(new SctpUdpHelperError(`no hello within ${timeoutMs} ms`));
      }, timeoutMs);
      this.child.once('error', (cause) => {
        clearTimeout(timer);
        reject(new SctpUdpHelperError(`cannot run the helper: ${cause.message}`, { cause }));
      });
      this.onHello = (v) => {
        clearTimeout(timer);
        this.onHello = undefined;
        resolve(v);
      };
    });
  }

  /** Binds a socket; resolves with (errno or 0; -1: the helper exited, handle, port). */
  bind(s: HelperSocket, port: number): Promise<{ err: number; handle: number; port: number }> {
    if (this.exited) return Promise.resolve({ err: -1, handle: 0, port: 0 });
    const req = this.nextReq++;
    const local = Buffer.from(s.address, 'latin1');
    const remote = Buffer.from(s.connect?.address ?? '', 'latin1');
    const f = this.frame(0x42, 14 + local.length + remote.length); // 'B'
    if (f === undefined)
      return Promise.resolve({ err: constants.errno.ENOBUFS, handle: 0, port: 0 });
    const [b, at] = f;
    b.writeUInt32BE(req, at);
    b.writeUInt32BE(Math.max(0, Math.min(s.bufferBytes, 0x7fffffff)), at + 4);
    b.writeUInt16BE(port, at + 8);
    b.writeUInt16BE(s.connect?.port ?? 0, at + 10);
    b[at + 12] = local.length;
    local.copy(b, at + 13);
    b[at + 13 + local.length] = remote.length;
    remote.copy(b, at + 14 + local.length);
    return new Promise((resolve) => {
      this.binds.set(req, (err, handle, p) => resolve({ err, handle, port: p }));
    });
  }

  closeHandle(handle: number): void {
    const f = this.frame(0x43, 4); // 'C'
    if (f !== undefined) f[0].writeUInt32BE(handle, f[1]);
  }

  /** Room for a frame with a body of `body` bytes in the current write: [buffer, body offset]. */
  frame(type: number, body: number): [Buffer, number] | undefined {
    const stdin = this.child.stdin;
    if (this.exited || stdin === null || stdin.destroyed) return undefined;
    const need = 5 + body;
    if (this.out.length - this.outOff < need) {
      this.flush();
      this.out = Buffer.allocUnsafeSlow(Math.max(OUT_CHUNK, need));
      this.outStart = 0;
      this.outOff = 0;
    }
    const b = this.out;
    const at = this.outOff;
    b.writeUInt32BE(1 + body, at);
    b[at + 4] = type;
    this.outOff += need;
    if (!this.flushQueued) {
      this.flushQueued = true;
      process.nextTick(this.flushBound);
    }
    return [b, at + 5];
  }

  /** Bytes written to the helper and not yet taken by it, plus those not yet written. */
  get backlog(): number {
    return (this.child.stdin?.writableLength ?? 0) + this.outOff - this.outStart;
  }

  /** The frames of this turn go out in one write (a slice: the buffer is not reused under it). */
  private flush(): void {
    this.flushQueued = false;
    if (this.outOff === this.outStart) return;
    const stdin = this.child.stdin;
    if (!this.exited && stdin !== null && !stdin.destroyed)
      stdin.write(this.out.subarray(this.outStart, this.outOff));
    this.outStart = this.outOff;
  }

  /**
   * Frames out of one pipe read. A frame cut by the read's end is kept (copied) and completed from
   * the next read alone, so a read is never copied whole.
   */
  private onData(chunk: Buffer): void {
    let off = 0;
    if (this.carry.length > 0) {
      const c = this.carry;
      if (c.length < 4) {
        const take = Math.min(4 - c.length, chunk.length);
        this.carry = Buffer.concat([c, chunk.subarray(0, take)]);
        off = take;
        if (this.carry.length < 4) return;
      }
      const len = this.carry.readUInt32BE(0);
      if (len > MAX_FRAME + 32) {
        this.child.kill('SIGKILL');
        return;
      }
      const missing = 4 + len - this.carry.length;
      if (chunk.length - off < missing) {
        this.carry = Buffer.concat([this.carry, chunk.subarray(off)]);
        return;
      }
      const whole = Buffer.concat([this.carry, chunk.subarray(off, off + missing)]);
      off += missing;
      this.carry = EMPTY;
      this.onFrame(whole, 4, len);
    }
    const b = chunk;
    while (b.length - off >= 5) {
      const len = b.readUInt32BE(off);
      if (len > MAX_FRAME + 32) {
        this.child.kill('SIGKILL');
        return;
      }
      if (b.length - off - 4 < len) break;
      this.onFrame(b, off + 4, len);
      off += 4 + len;
    }
    if (off < b.length) this.carry = Buffer.from(b.subarray(off));
  }

  private onFrame(b: Buffer, off: number, len: number): void {
    const type = b[off];
    if (type === 0x50 && len >= 8) {
      // 'P' u32 handle, u16 port, u8 alen, addr, packet
      const s = this.owner.byHandle.get(b.readUInt32BE(off + 1));
      if (s === undefined) return;
      const port = b.readUInt16BE(off + 5);
      const a = b[off + 7] as number;
      let text: string;
      let at = off + 8;
      if (a === 4) {
        const key = b.readUInt32BE(at);
        if (key !== s.srcKey) {
          s.srcKey = key;
          s.srcText = `${b[at]}.${b[at + 1]}.${b[at + 2]}.${b[at + 3]}`;
        }
        text = s.srcText;
        at += 4;
      } else {
        const n = a & 0x7f;
        text = b.toString('latin1', at, at + n);
        at += n;
      }
      this.owner.counters.packetsIn++;
      // A copy: an association may keep DATA payloads, and a slice would pin the whole pipe read.
      const msg = Buffer.allocUnsafe(off + len - at);
      b.copy(msg, 0, at, off + len);
      s.events.onMessage(msg, text, port);
      return;
    }
    if (type === 0x4b && len >= 12) {
      // 'K' u32 handle, u32 count, u16 port, u8 alen, addr, u16 length, first bytes
      const s = this.owner.byHandle.get(b.readUInt32BE(off + 1));
      const count = b.readUInt32BE(off + 5);
      this.owner.counters.badChecksums += count;
      if (s === undefined) return;
      const port = b.readUInt16BE(off + 9);
      const a = b[off + 11] as number;
      let at = off + 12;
      let text: string;
      if (a === 4) {
        text = `${b[at]}.${b[at + 1]}.${b[at + 2]}.${b[at + 3]}`;
        at += 4;
      } else {
        text = b.toString('latin1', at, at + (a & 0x7f));
        at += a & 0x7f;
      }
      const head = Buffer.from(b.subarray(Math.min(at + 2, off + len), off + len));
      s.events.onRefused?.('bad-checksum', count, head, text, port);
      return;
    }
    if (type === 0x45 && len >= 13) {
      // 'E' u32 handle, u32 count, i32 errno
      this.owner.counters.sendErrors += b.readUInt32BE(off + 5);
      return;
    }
    if (type === 0x62 && len >= 15) {
      // 'b' u32 req, i32 err, u32 handle, u16 port
      const req = b.readUInt32BE(off + 1);
      const done = this.binds.get(req);
      this.binds.delete(req);
      done?.(b.readInt32BE(off + 5), b.readUInt32BE(off + 9), b.readUInt16BE(off + 13));
      return;
    }
    if (type === 0x48 && len >= 5) this.onHello?.(b.readUInt32BE(off + 1));
  }

  /** Stops the helper (its stdin closes; it exits, its sockets with it); SIGKILL after 2 s. */
  stop(): void {
    if (this.exited) return;
    this.flush();
    this.child.stdin?.end();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 2000);
    timer.unref();
    this.child.once('exit', () => clearTimeout(timer));
  }
}

/**
 * The provider of `udpIo: 'helper'` (see the module comment): one helper process for every socket
 * of one engine, started on the first open.
 */
export class HelperUdpSockets implements UdpSocketProvider {
  readonly checksumOffload = true;
  readonly counters: UdpHelperCounters = {
    packetsIn: 0,
    packetsOut: 0,
    badChecksums: 0,
    sendErrors: 0,
    sendDropped: 0,
    starts: 0,
    deaths: 0,
  };
  /** Open sockets by their current helper handle. */
  readonly byHandle = new Map<number, HelperSocket>();
  private readonly sockets = new Set<HelperSocket>();
  private current: HelperProcess | undefined;
  private starting: Promise<HelperProcess> | undefined;
  private readonly stopping = new Set<HelperProcess>();
  private restartTimer: ReturnType<typeof setTimeout> | undefined;
  private restartDelay: number;
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
    const child = spawn(path, [], { stdio: ['pipe', 'pipe', 'pipe'] });
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
    return h;
  }

  async open(o: UdpSocketOpenOptions, events: UdpSocketEvents): Promise<UdpSocketHandle> {
    const h = await this.ensure();
    const s = new HelperSocket(this, o.address, o.port, o.connect, o.bufferBytes, events);
    const r = await h.bind(s, o.port);
    if (r.err !== 0) {
      const what = `UDP socket on ${o.address}:${o.port}`;
      if (r.err < 0) throw new SctpUdpHelperError(`exited while binding a ${what}`);
      const e = new SctpError(
        `ERR_SCTP_UDP_SOCKET`,
        `${what}${o.connect ? ` to ${o.connect.address}:${o.connect.port}` : ''}: ${errnoName(r.err)}`,
      );
      throw Object.assign(e, { errno: errnoName(r.err) });
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
    this.restartDelay = this.o.restartBackoffMs ?? 100;
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
