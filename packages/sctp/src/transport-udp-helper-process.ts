/**
 * The Node side of one `sctp-udp-helper` process (transport-udp-helper.ts has the why): its frames
 * in (datagrams, bad-checksum reports, send errors, bind answers, hello) and out (binds, closes,
 * datagrams to send, collected per tick into one write), and the sockets as Node sees them.
 */
import type { ChildProcess } from 'node:child_process';
import { constants } from 'node:os';
import { SctpError } from './errors.js';
import { watchHelperChild } from './transport-raw-helper.js';
import type { UdpSocketEvents, UdpSocketHandle } from './transport-udp.js';

/** The UDP helper could not be built, started, or answered wrongly: `detail` says which and the fix. */
export class SctpUdpHelperError extends SctpError {
  constructor(detail: string, options?: { cause?: unknown }) {
    super('ERR_SCTP_UDP_HELPER', `SCTP UDP helper (udpIo: 'helper'): ${detail}`, options);
  }
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
  /** UDP GSO sends: runs of datagrams to one destination that left in one sendmsg. */
  gsoSends: number;
  /** Datagrams sent in those runs. */
  gsoSegments: number;
  /** GSO sends the kernel refused (EIO, EINVAL, ...): their socket sends without GSO from then on. */
  gsoRefused: number;
  /** Reads that returned datagrams coalesced by UDP GRO (split again before Node sees them). */
  groReads: number;
  /** Datagrams those reads carried. */
  groSegments: number;
}

/** What a helper process reports to the provider that runs it. */
export interface HelperOwner {
  readonly counters: UdpHelperCounters;
  /** Open sockets by their current helper handle. */
  readonly byHandle: ReadonlyMap<number, HelperSocket>;
  /** The process ended (`why` for the logs). */
  exited(h: HelperProcess, why: string): void;
  /** The kernel refused a GSO send (`errno`); `count` refusals since the last report. */
  gsoRefused(count: number, errno: number): void;
  /** Queues a datagram of `s` (see HelperUdpSockets.send). */
  send(s: HelperSocket, msg: Buffer, port: number, address: string): void;
  closeSocket(s: HelperSocket): void;
}

const EMPTY = Buffer.alloc(0);
/** Bytes of the buffer frames to the helper are written into; one write per turn takes a slice. */
const OUT_CHUNK = 256 * 1024;
/** The largest frame the helper accepts (its MAX_FRAME): a datagram of up to 65 536 bytes. */
const MAX_FRAME = 65536 + 64;

/** One socket as Node sees it; its helper handle changes when a restarted helper binds it again. */
export class HelperSocket implements UdpSocketHandle {
  handle = 0;
  closed = false;
  /** Last source address and its text, for the datagrams of one peer (most of them). */
  srcKey = -1;
  srcText = '';
  constructor(
    readonly provider: HelperOwner,
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
export class HelperProcess {
  exited = false;
  private carry: Buffer = EMPTY;
  private readonly watch: { stderrTail(): string };
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
    private readonly owner: HelperOwner,
  ) {
    child.stdout?.on('data', (chunk: Buffer) => this.onData(chunk));
    this.watch = watchHelperChild(child, (why) => {
      this.exited = true;
      this.onHello?.(-1);
      for (const done of this.binds.values()) done(-1, 0, 0);
      this.binds.clear();
      owner.exited(this, why);
    });
  }

  get stderrTail(): string {
    return this.watch.stderrTail();
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
    // No frame: the helper's stdin is gone (it is exiting: -1, its exit restarts it) or full.
    if (f === undefined) {
      const gone = this.child.stdin === null || this.child.stdin.destroyed;
      return Promise.resolve({ err: gone ? -1 : constants.errno.ENOBUFS, handle: 0, port: 0 });
    }
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
    // Nothing left queued: the kernel took the bytes synchronously and no write holds the slice,
    // so the buffer is filled again from its start instead of a new one being made.
    if (stdin !== null && stdin.writableLength === 0) {
      this.outStart = 0;
      this.outOff = 0;
    }
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
      if (at > off + len) return;
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
    if (type === 0x47 && len >= 25) {
      // 'G' u32 gso sends, u32 gso segments, u32 gso refused, i32 errno, u32 gro reads, u32 gro segments
      const c = this.owner.counters;
      c.gsoSends += b.readUInt32BE(off + 1);
      c.gsoSegments += b.readUInt32BE(off + 5);
      const refused = b.readUInt32BE(off + 9);
      c.groReads += b.readUInt32BE(off + 17);
      c.groSegments += b.readUInt32BE(off + 21);
      if (refused > 0) this.owner.gsoRefused(refused, b.readInt32BE(off + 13));
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
