/**
 * The raw-IP helper process: Node 20 has no raw sockets, so the raw SCTP transport spawns
 * `native/sctp-raw-helper.c` (compiled on first use with the system C compiler, or a prebuilt binary
 * given as `helperPath`) and talks to it over stdin/stdout in length-prefixed frames. The helper
 * owns the raw IPv4 protocol-132 sockets; everything SCTP (guard, demux, associations) stays here.
 * A separate process rather than an N-API addon: no build step at install (pnpm blocks dependency
 * build scripts), no node-gyp or Node headers, and a fault in C cannot take the proxy down.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { constants } from 'node:os';
import { fileURLToPath } from 'node:url';
import { buildNativeHelper } from '@userspace-proxy/core/sockets';
import { SctpError } from './errors.js';

/** The helper could not be built, started, or died: `detail` says which. */
export class SctpRawHelperError extends SctpError {
  constructor(detail: string, options?: { cause?: unknown }) {
    super('ERR_SCTP_RAW_HELPER', `SCTP raw-IP helper: ${detail}`, options);
  }
}

/** Raw sockets need root (or CAP_NET_RAW): the helper's socket(AF_INET, SOCK_RAW, 132) was refused. */
export class SctpRawPermissionError extends SctpError {
  constructor(errno: string) {
    super(
      'ERR_SCTP_RAW_PERMISSION',
      `the raw SCTP transport needs root (or CAP_NET_RAW): raw socket refused with ${errno}`,
    );
  }
}

/** Opening or binding one raw socket failed (for example EADDRNOTAVAIL: not a local address). */
export class SctpRawSocketError extends SctpError {
  readonly errno: string;
  constructor(address: string, errno: string) {
    super('ERR_SCTP_RAW_SOCKET', `raw SCTP socket on ${address} failed: ${errno}`);
    this.errno = errno;
  }
}

/** How the helper is found and run. */
export interface RawHelperOptions {
  /** A prebuilt helper binary. Default: `native/sctp-raw-helper.c` compiled into `native/build/`. */
  readonly helperPath?: string;
  /** C compiler used for the on-demand build. Default `cc`. */
  readonly compiler?: string;
  /**
   * Words put before the helper's path, for example `['ip', 'netns', 'exec', 'ns1']` to run the raw
   * sockets in another network namespace (the tests do). Default none.
   */
  readonly command?: readonly string[];
  /** Bytes queued to the helper's stdin beyond which packets are dropped (as a full UDP socket would). Default 4 MiB. */
  readonly maxQueuedBytes?: number;
  /** How long the helper may take to start and answer its hello, ms. Default 10000. */
  readonly startTimeoutMs?: number;
}

/** Counters of one helper. */
export interface RawHelperCounters {
  packetsIn: number;
  packetsOut: number;
  /** Sends the helper reported failed (sendto errors such as ENETUNREACH or EAGAIN). */
  sendErrors: number;
  /** Packets not handed to the helper because its stdin backlog was past `maxQueuedBytes`. */
  sendDropped: number;
}

/** One raw socket of the helper. */
export interface RawSocketHandle {
  readonly address: string;
  /** Sends one SCTP packet to `dst` (the kernel adds the IPv4 header). Never throws. */
  send(packet: Buffer, dst: string): void;
  close(): void;
}

const SOURCE = fileURLToPath(new URL('../native/sctp-raw-helper.c', import.meta.url));

/** Name of an errno number (`EPERM`), or the number. */
export function errnoName(n: number): string {
  for (const [name, v] of Object.entries(constants.errno)) if (v === n) return name;
  return `errno ${n}`;
}

/**
 * Compiles the helper once per source version (core's {@link buildNativeHelper}: the file name
 * carries a hash of the source, and the binary is renamed into place so concurrent builds never see
 * half a binary).
 */
export function buildRawHelper(compiler = 'cc'): Promise<string> {
  return buildNativeHelper({
    source: SOURCE,
    outDir: fileURLToPath(new URL('../native/build/', import.meta.url)),
    name: 'sctp-raw-helper',
    compiler,
  }).catch((cause: unknown) => {
    throw new SctpRawHelperError(cause instanceof Error ? cause.message : String(cause), { cause });
  });
}

/**
 * Watches a helper child (the raw one and the UDP one): keeps the last 2 000 characters of its
 * stderr, swallows its pipes' errors (a dying child fails pending writes; 'exit' reports it, never
 * an unhandled 'error'), and calls `onExit` once with why it exited, stderr's tail included.
 */
export function watchHelperChild(
  child: ChildProcess,
  onExit: (why: string) => void,
): { stderrTail(): string } {
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-2000);
  });
  child.on('error', () => undefined);
  child.stdin?.on('error', () => undefined);
  child.stdout?.on('error', () => undefined);
  child.once('exit', (code, signal) => {
    onExit(`exited (${signal ?? code})${stderr ? `: ${JSON.stringify(stderr.slice(-300))}` : ''}`);
  });
  return { stderrTail: () => stderr.slice(-300) };
}

function ipv4Bytes(address: string): Buffer {
  const parts = address.split('.').map(Number);
  return Buffer.from(parts);
}

function ipv4String(b: Buffer, off: number): string {
  return `${b[off]}.${b[off + 1]}.${b[off + 2]}.${b[off + 3]}`;
}

/** The running helper; made by {@link RawHelper.start}. */
export class RawHelper {
  readonly counters: RawHelperCounters = {
    packetsIn: 0,
    packetsOut: 0,
    sendErrors: 0,
    sendDropped: 0,
  };
  private readonly receivers = new Map<number, (packet: Buffer, src: string) => void>();
  private readonly pending = new Map<number, (err: number, body: Buffer) => void>();
  private nextId = 1;
  private carry: Buffer = Buffer.alloc(0);
  private corked = false;
  private exited = false;
  private readonly watch: { stderrTail(): string };
  private onHello: ((err: number) => void) | undefined;
  private readonly exitListeners: Array<(why: string) => void> = [];

  private constructor(
    private readonly child: ChildProcess,
    private readonly maxQueuedBytes: number,
  ) {
    child.stdout?.on('data', (chunk: Buffer) => this.onData(chunk));
    this.watch = watchHelperChild(child, (why) => {
      this.exited = true;
      this.onHello?.(-1);
      for (const resolve of this.pending.values()) resolve(-1, Buffer.alloc(0));
      this.pending.clear();
      for (const l of this.exitListeners) l(why);
    });
  }

  /** Builds (when needed) and starts the helper; resolves once it proved it can open a raw socket. */
  static async start(o: RawHelperOptions = {}): Promise<RawHelper> {
    const path = o.helperPath ?? (await buildRawHelper(o.compiler));
    const argv = [...(o.command ?? []), path];
    const child = spawn(argv[0] as string, argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
    const h = new RawHelper(child, o.maxQueuedBytes ?? 4 << 20);
    const err = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new SctpRawHelperError(`no hello within ${o.startTimeoutMs ?? 10_000} ms`));
      }, o.startTimeoutMs ?? 10_000);
      child.once('error', (cause) => {
        clearTimeout(timer);
        reject(new SctpRawHelperError(`cannot run ${argv.join(' ')}: ${cause.message}`, { cause }));
      });
      h.onHello = (e) => {
        clearTimeout(timer);
        h.onHello = undefined;
        resolve(e);
      };
    });
    if (err === 0) return h;
    h.close();
    if (err === constants.errno.EPERM || err === constants.errno.EACCES)
      throw new SctpRawPermissionError(errnoName(err));
    throw new SctpRawHelperError(
      err < 0 ? `exited before its hello: ${h.watch.stderrTail()}` : errnoName(err),
    );
  }

  /** True once the process is gone. */
  get isExited(): boolean {
    return this.exited;
  }

  /** Called once when the process ends (reason for logs). */
  onExit(listener: (why: string) => void): void {
    this.exitListeners.push(listener);
  }

  /** Opens a raw socket bound to `address` (0.0.0.0: every SCTP packet not bound elsewhere). */
  async open(
    address: string,
    onPacket: (packet: Buffer, src: string) => void,
  ): Promise<RawSocketHandle> {
    const id = this.nextId++;
    const body = Buffer.alloc(8);
    body.writeUInt32BE(id, 0);
    ipv4Bytes(address).copy(body, 4);
    this.receivers.set(id, onPacket);
    const err = await this.request('O', id, body);
    if (err !== 0) {
      this.receivers.delete(id);
      if (err < 0) throw new SctpRawHelperError('exited');
      throw new SctpRawSocketError(address, errnoName(err));
    }
    return {
      address,
      send: (packet, dst) => this.send(id, packet, dst),
      close: () => {
        if (!this.receivers.delete(id)) return;
        const b = Buffer.alloc(4);
        b.writeUInt32BE(id, 0);
        this.write('C', b);
      },
    };
  }

  /** The source address the kernel (in the helper's namespace) picks towards `dst`. */
  async route(dst: string): Promise<string> {
    const req = this.nextId++;
    const body = Buffer.alloc(8);
    body.writeUInt32BE(req, 0);
    ipv4Bytes(dst).copy(body, 4);
    let src = '';
    const err = await this.request('R', req, body, (b) => {
      src = ipv4String(b, 0);
    });
    if (err !== 0) throw new SctpRawSocketError(`a route to ${dst}`, errnoName(err));
    return src;
  }

  private request(
    type: string,
    id: number,
    body: Buffer,
    onBody?: (b: Buffer) => void,
  ): Promise<number> {
    if (this.exited) return Promise.resolve(-1);
    return new Promise<number>((resolve) => {
      this.pending.set(id, (err, rest) => {
        if (err === 0) onBody?.(rest);
        resolve(err);
      });
      this.write(type, body);
    });
  }

  private send(id: number, packet: Buffer, dst: string): void {
    const stdin = this.child.stdin;
    if (this.exited || stdin === null || !this.receivers.has(id)) return;
    if (stdin.writableLength > this.maxQueuedBytes) {
      this.counters.sendDropped++;
      return;
    }
    const f = Buffer.allocUnsafe(13 + packet.length);
    f.writeUInt32BE(9 + packet.length, 0);
    f[4] = 0x53; // 'S'
    f.writeUInt32BE(id, 5);
    const parts = dst.split('.');
    for (let i = 0; i < 4; i++) f[9 + i] = Number(parts[i]);
    packet.copy(f, 13);
    this.counters.packetsOut++;
    this.push(f);
  }

  private write(type: string, body: Buffer): void {
    const f = Buffer.allocUnsafe(5 + body.length);
    f.writeUInt32BE(1 + body.length, 0);
    f[4] = type.charCodeAt(0);
    body.copy(f, 5);
    this.push(f);
  }

  /** Writes a frame; the frames of one tick go out in one write. */
  private push(frame: Buffer): void {
    const stdin = this.child.stdin;
    if (this.exited || stdin === null || stdin.destroyed) return;
    if (!this.corked) {
      this.corked = true;
      stdin.cork();
      process.nextTick(() => {
        this.corked = false;
        stdin.uncork();
      });
    }
    stdin.write(frame);
  }

  private onData(chunk: Buffer): void {
    let b = this.carry.length > 0 ? Buffer.concat([this.carry, chunk]) : chunk;
    let off = 0;
    while (b.length - off >= 5) {
      const len = b.readUInt32BE(off);
      if (b.length - off - 4 < len) break;
      this.onFrame(b, off + 4, len);
      off += 4 + len;
    }
    b = b.subarray(off);
    this.carry = b.length > 0 ? Buffer.from(b) : Buffer.alloc(0);
  }

  private onFrame(b: Buffer, off: number, len: number): void {
    const type = String.fromCharCode(b[off] as number);
    if (type === 'P' && len >= 9) {
      const r = this.receivers.get(b.readUInt32BE(off + 1));
      if (r === undefined) return;
      this.counters.packetsIn++;
      // A copy: the association may keep DATA payloads, and a slice would pin the whole pipe read.
      r(Buffer.from(b.subarray(off + 9, off + len)), ipv4String(b, off + 5));
      return;
    }
    if (type === 'H' && len >= 5) {
      this.onHello?.(b.readInt32BE(off + 1));
      return;
    }
    if ((type === 'o' || type === 'r') && len >= 9) {
      const id = b.readUInt32BE(off + 1);
      const done = this.pending.get(id);
      this.pending.delete(id);
      done?.(b.readInt32BE(off + 5), Buffer.from(b.subarray(off + 9, off + len)));
      return;
    }
    if (type === 'e') this.counters.sendErrors++;
  }

  /** Stops the helper (its stdin closes; it exits and its sockets go with it). */
  close(): void {
    if (this.exited) return;
    this.child.stdin?.end();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 2000);
    timer.unref();
    this.child.once('exit', () => clearTimeout(timer));
  }
}
