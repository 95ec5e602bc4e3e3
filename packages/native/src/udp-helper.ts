/**
 * The UDP helper process and its frames (documented in native/udp-relay-helper.c and
 * docs/native.md): every command on stdin, every event on stdout, length-prefixed. The frames of
 * one tick go out in one write. This file knows the bytes; udp-engine.ts what they mean.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { NativeHelperError } from './errors.js';
import { awaitHello, FrameReader, superviseChild } from './helper-process.js';
import { MAX_THREADS, readId, writeId } from './relay-protocol.js';
import {
  buildUdpRelayHelper,
  UDP_CLOSE_REASONS,
  type UdpHelperEvents,
  type UdpHelperOptions,
  type UdpListenSpec,
} from './udp-protocol.js';

/** One running UDP helper process; made by {@link UdpHelper.start}. */
export class UdpHelper {
  readonly threads: number;
  readonly #child: ChildProcess;
  readonly #events: UdpHelperEvents;
  #out: Buffer[] = [];
  #scheduled = false;
  #exited = false;
  readonly #stderr: { stderrTail(): string };
  #onHello: ((threads: number) => void) | undefined;
  readonly #pendingListens = new Map<number, (errno: number, port: number) => void>();
  readonly #pendingCloses = new Map<number, () => void>();

  private constructor(child: ChildProcess, events: UdpHelperEvents, threads: number) {
    this.#child = child;
    this.#events = events;
    this.threads = threads;
    const reader = new FrameReader((b, off, len) => this.#onFrame(b, off, len));
    child.stdout?.on('data', (chunk: Buffer) => reader.push(chunk));
    this.#stderr = superviseChild(child, (why) => {
      this.#exited = true;
      this.#onHello?.(-1);
      for (const done of this.#pendingListens.values()) done(-1, 0);
      this.#pendingListens.clear();
      for (const done of this.#pendingCloses.values()) done();
      this.#pendingCloses.clear();
      this.#events.exited(why);
    });
  }

  /** Builds (when needed) and starts a helper; resolves once it said hello. */
  static async start(o: UdpHelperOptions, events: UdpHelperEvents): Promise<UdpHelper> {
    const path = o.helperPath ?? (await buildUdpRelayHelper(o.compiler));
    const n = Math.min(
      MAX_THREADS,
      o.threads !== undefined && o.threads > 0 ? o.threads : availableParallelism(),
    );
    const child = spawn(path, ['--threads', String(n)], { stdio: ['pipe', 'pipe', 'pipe'] });
    const h = new UdpHelper(child, events, n);
    const threads = await awaitHello(child, path, o.startTimeoutMs ?? 10_000, 'UDP', (hello) => {
      h.#onHello = (t) => {
        h.#onHello = undefined;
        hello(t);
      };
    });
    if (threads < 0) {
      throw new NativeHelperError(`exited before its hello: ${h.#stderr.stderrTail()}`, {
        protocol: 'UDP',
      });
    }
    if (threads !== n) {
      h.stop();
      throw new NativeHelperError(`asked for ${n} threads, the helper runs ${threads}`, {
        protocol: 'UDP',
      });
    }
    return h;
  }

  /** The helper's process id (tests kill it). */
  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** True once the process is gone. */
  get isExited(): boolean {
    return this.#exited;
  }

  /** 'L': binds on every thread; resolves with 0 and the bound port, or an errno (-1: exited). */
  listen(listener: number, spec: UdpListenSpec): Promise<{ errno: number; port: number }> {
    if (this.#exited) return Promise.resolve({ errno: -1, port: 0 });
    return new Promise((resolve) => {
      this.#pendingListens.set(listener, (errno, bound) => resolve({ errno, port: bound }));
      const a = Buffer.from(spec.address, 'latin1');
      const f = this.#frame(0x4c, 27 + a.length);
      f.writeUInt32BE(listener, 5);
      f.writeUInt16BE(spec.port, 9);
      f.writeUInt32BE(Math.min(spec.idleMs, 0x7fffffff) >>> 0, 11);
      f.writeUInt32BE(Math.min(spec.maxSessions, 0xffffffff) >>> 0, 15);
      f.writeUInt32BE(Math.min(spec.maxPerSource, 0xffffffff) >>> 0, 19);
      f.writeUInt32BE(Math.min(spec.receiveBufferBytes, 0x7fffffff) >>> 0, 23);
      f.writeUInt32BE(Math.min(spec.sessionBufferBytes, 0x7fffffff) >>> 0, 27);
      f[31] = a.length;
      a.copy(f, 32);
      this.#push(f);
    });
  }

  /** 'I': the listener's idle timeout from now on (the ServiceInfo's, known at proxyLoop). */
  setIdle(listener: number, idleMs: number): void {
    const f = this.#frame(0x49, 8);
    f.writeUInt32BE(listener, 5);
    f.writeUInt32BE(Math.min(Math.max(1, Math.ceil(idleMs)), 0x7fffffff) >>> 0, 9);
    this.#push(f);
  }

  /** 'X': closes a listener on every thread (its sessions end); resolves once it is closed. */
  closeListener(listener: number): Promise<void> {
    if (this.#exited) return Promise.resolve();
    return new Promise((resolve) => {
      this.#pendingCloses.set(listener, resolve);
      const f = this.#frame(0x58, 4);
      f.writeUInt32BE(listener, 5);
      this.#push(f);
    });
  }

  /** 'P': endpoints picked ahead for thread `thread`'s new sessions on `listener`. */
  picks(
    listener: number,
    thread: number,
    epoch: number,
    picks: readonly { readonly host: string; readonly port: number }[],
  ): void {
    let size = 0;
    for (const p of picks) size += 3 + p.host.length;
    const f = this.#frame(0x50, 11 + size);
    f.writeUInt32BE(listener, 5);
    f[9] = thread;
    f.writeUInt32BE(epoch >>> 0, 10);
    f.writeUInt16BE(picks.length, 14);
    let at = 16;
    for (const p of picks) {
      f.writeUInt16BE(p.port, at);
      f[at + 2] = p.host.length;
      f.write(p.host, at + 3, 'latin1');
      at += 3 + p.host.length;
    }
    this.#push(f);
  }

  /** 'V': Node's verdict on an asked session: relay to `target`, or drop it (undefined). */
  verdict(session: number, target: { host: string; port: number } | undefined): void {
    const a = Buffer.from(target?.host ?? '', 'latin1');
    const f = this.#frame(0x56, 12 + a.length);
    writeId(f, 5, session);
    f[13] = target === undefined ? 0 : 1;
    f.writeUInt16BE(target?.port ?? 0, 14);
    f[16] = a.length;
    a.copy(f, 17);
    this.#push(f);
  }

  /** 'C': ends a session; its 'c' follows with `reason`. */
  close(session: number, reason: 'closed' | 'endpoint-removed'): void {
    const f = this.#frame(0x43, 9);
    writeId(f, 5, session);
    f[13] = UDP_CLOSE_REASONS.indexOf(reason);
    this.#push(f);
  }

  /** Stops the helper: its stdin closes, it exits, and every socket it holds goes with it. */
  stop(): void {
    if (this.#exited) return;
    this.#flush();
    this.#child.stdin?.end();
    const timer = setTimeout(() => this.#child.kill('SIGKILL'), 2000);
    timer.unref();
    this.#child.once('exit', () => clearTimeout(timer));
  }

  #frame(type: number, bodyLength: number): Buffer {
    const f = Buffer.allocUnsafe(5 + bodyLength);
    f.writeUInt32BE(1 + bodyLength, 0);
    f[4] = type;
    return f;
  }

  #push(frame: Buffer): void {
    if (this.#exited) return;
    this.#out.push(frame);
    if (!this.#scheduled) {
      this.#scheduled = true;
      process.nextTick(() => this.#flush());
    }
  }

  #flush(): void {
    this.#scheduled = false;
    const out = this.#out;
    if (out.length === 0) return;
    this.#out = [];
    const stdin = this.#child.stdin;
    if (this.#exited || stdin == null || stdin.destroyed) return;
    stdin.write(out.length === 1 ? (out[0] as Buffer) : Buffer.concat(out));
  }

  #onFrame(b: Buffer, off: number, len: number): void {
    const e = this.#events;
    switch (b[off]) {
      case 0x6e: // 'n' asked: u64 session, u32 listener, u16 port, u8 alen, addr
        if (len >= 16) {
          const n = Math.min(b[off + 15] as number, len - 16);
          e.asked(
            readId(b, off + 1),
            b.readUInt32BE(off + 9),
            b.toString('latin1', off + 16, off + 16 + n),
            b.readUInt16BE(off + 13),
          );
        }
        return;
      case 0x6f: // 'o' opened with a pick
        if (len >= 20) {
          const n = Math.min(b[off + 19] as number, len - 20);
          const p = off + 20 + n;
          if (len < 20 + n + 3) return;
          const en = Math.min(b[p + 2] as number, len - 20 - n - 3);
          e.opened(
            readId(b, off + 1),
            b.readUInt32BE(off + 9),
            b.readUInt32BE(off + 13),
            b.toString('latin1', off + 20, p),
            b.readUInt16BE(off + 17),
            joinEndpoint(b.toString('latin1', p + 3, p + 3 + en), b.readUInt16BE(p)),
          );
        }
        return;
      case 0x63: // 'c' closed
        if (len >= 50) {
          const u64 = (at: number) => readId(b, off + at);
          e.closed(
            u64(1),
            {
              datagramsIn: u64(9),
              bytesIn: u64(17),
              datagramsOut: u64(25),
              bytesOut: u64(33),
              dropped: b.readUInt32BE(off + 41),
            },
            UDP_CLOSE_REASONS[b[off + 45] as number] ?? 'error',
            b.readInt32BE(off + 46),
          );
        }
        return;
      case 0x64: // 'd' dropped
        if (len >= 13)
          e.dropped(b.readUInt32BE(off + 1), b.readUInt32BE(off + 5), b.readUInt32BE(off + 9));
        return;
      case 0x70: // 'p' picks taken
        if (len >= 10)
          e.picksTaken(b.readUInt32BE(off + 1), b[off + 5] as number, b.readUInt32BE(off + 6));
        return;
      case 0x6c: // 'l' listening
        if (len >= 11) {
          const listener = b.readUInt32BE(off + 1);
          const done = this.#pendingListens.get(listener);
          this.#pendingListens.delete(listener);
          done?.(b.readInt32BE(off + 5), b.readUInt16BE(off + 9));
        }
        return;
      case 0x78: // 'x' unlistened
        if (len >= 5) {
          const listener = b.readUInt32BE(off + 1);
          const done = this.#pendingCloses.get(listener);
          this.#pendingCloses.delete(listener);
          done?.();
        }
        return;
      case 0x48: // 'H' hello
        if (len >= 9) this.#onHello?.(b.readUInt32BE(off + 1));
        return;
    }
  }
}

/** "ip:port", bracketed for IPv6, as core's joinHostPort writes endpoints. */
function joinEndpoint(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}
