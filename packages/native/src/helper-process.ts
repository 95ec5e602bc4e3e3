/**
 * What every native helper process needs from Node, whatever it relays: the child's stderr kept
 * for the exit message, no unhandled 'error' from a dying child's pipes, the wait for its hello,
 * length-prefixed frames read from chunks, the listen and close replies, the stop, the restart
 * back-off and the factories' checks. The TCP helper (relay-helper.ts, engine.ts,
 * native-factory.ts) and the UDP one (udp-helper.ts, udp-engine.ts, udp-factory.ts) share them,
 * so the two children live and die alike.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import net from 'node:net';
import { availableParallelism } from 'node:os';
import {
  InvalidOptionError,
  type ProxySocketContext,
  SocketOpenError,
} from '@userspace-proxy/core';
import { joinHostPort } from '@userspace-proxy/core/sockets';
import { NativeHelperError } from './errors.js';
import { MAX_THREADS } from './relay-protocol.js';

/** Which helper: named in its errors ("native UDP helper: ..."). */
export type HelperProtocol = 'TCP' | 'UDP';

/** What starting any helper takes (RelayHelperOptions and UdpHelperOptions are this shape). */
export interface HelperStartOptions {
  readonly helperPath?: string;
  readonly compiler?: string;
  readonly threads?: number;
  readonly startTimeoutMs?: number;
}

/**
 * Spawns a helper (built by `build` when no `helperPath` is given) with `--threads n`: `threads`,
 * or one per core, at most MAX_THREADS; stdin, stdout, stderr and `extraPipes` more are pipes.
 */
export async function spawnHelper(
  o: HelperStartOptions,
  build: (compiler?: string) => Promise<string>,
  extraPipes: (threads: number) => number,
): Promise<{ child: ChildProcess; path: string; threads: number }> {
  const path = o.helperPath ?? (await build(o.compiler));
  const threads = Math.min(
    MAX_THREADS,
    o.threads !== undefined && o.threads > 0 ? o.threads : availableParallelism(),
  );
  const stdio = Array.from({ length: 3 + extraPipes(threads) }, () => 'pipe' as const);
  const child = spawn(path, ['--threads', String(threads)], { stdio });
  return { child, path, threads };
}

/**
 * Checks a hello's thread count (-1: the helper exited first) against the `asked` one; a helper
 * running another count is stopped. Throws NativeHelperError saying which.
 */
export function checkHello(
  threads: number,
  asked: number,
  protocol: HelperProtocol,
  stderrTail: () => string,
  stop: () => void,
): void {
  if (threads < 0) {
    throw new NativeHelperError(`exited before its hello: ${stderrTail()}`, { protocol });
  }
  if (threads !== asked) {
    stop();
    throw new NativeHelperError(`asked for ${asked} threads, the helper runs ${threads}`, {
      protocol,
    });
  }
}

/** Stops a helper child: its stdin closes and it exits; SIGKILL after 2 s if it does not. */
export function stopChild(child: ChildProcess): void {
  child.stdin?.end();
  const timer = setTimeout(() => child.kill('SIGKILL'), 2000);
  timer.unref();
  child.once('exit', () => clearTimeout(timer));
}

/** A frame of `bodyLength` bytes after its type, header written: the body starts at offset 5. */
export function newFrame(type: number, bodyLength: number): Buffer {
  const f = Buffer.allocUnsafe(5 + bodyLength);
  f.writeUInt32BE(1 + bodyLength, 0);
  f[4] = type;
  return f;
}

/** Endpoints picked ahead for one helper thread, hosts as IP text (see picks-ahead.ts). */
export type Picks = readonly { readonly host: string; readonly port: number }[];

/**
 * A 'P' frame: u32 listener, u8 thread, u32 epoch, `extra` bytes the caller writes at offset 14
 * (the TCP helper's dial timeout), u16 count, then each pick as u16 port, u8 length, host.
 */
export function picksFrame(
  listener: number,
  thread: number,
  epoch: number,
  extra: number,
  picks: Picks,
): Buffer {
  let size = 0;
  for (const p of picks) size += 3 + p.host.length;
  const f = newFrame(0x50, 11 + extra + size);
  f.writeUInt32BE(listener, 5);
  f[9] = thread;
  f.writeUInt32BE(epoch >>> 0, 10);
  f.writeUInt16BE(picks.length, 14 + extra);
  let at = 16 + extra;
  for (const p of picks) {
    f.writeUInt16BE(p.port, at);
    f[at + 2] = p.host.length;
    f.write(p.host, at + 3, 'latin1');
    at += 3 + p.host.length;
  }
  return f;
}

/**
 * The helper's answers to 'L' (its 'l': errno and bound port) and 'X' (its 'x'), by listener id;
 * when the helper exits every one still waiting is answered (-1, closed) so nothing hangs.
 */
export class ListenerReplies {
  readonly #listens = new Map<number, (errno: number, port: number) => void>();
  readonly #closes = new Map<number, () => void>();

  /** Waits for the 'l' of `listener`; `send` writes the 'L' (after the wait is registered). */
  listen(listener: number, send: () => void): Promise<{ errno: number; port: number }> {
    return new Promise((resolve) => {
      this.#listens.set(listener, (errno, port) => resolve({ errno, port }));
      send();
    });
  }

  /** Waits for the 'x' of `listener`; `send` writes the 'X'. */
  close(listener: number, send: () => void): Promise<void> {
    return new Promise((resolve) => {
      this.#closes.set(listener, resolve);
      send();
    });
  }

  /** An 'l' frame at `off` (u32 listener, i32 errno, u16 port); a short one is ignored. */
  listening(b: Buffer, off: number, len: number): void {
    if (len < 11) return;
    const listener = b.readUInt32BE(off + 1);
    const done = this.#listens.get(listener);
    this.#listens.delete(listener);
    done?.(b.readInt32BE(off + 5), b.readUInt16BE(off + 9));
  }

  /** An 'x' frame at `off` (u32 listener); a short one is ignored. */
  unlistened(b: Buffer, off: number, len: number): void {
    if (len < 5) return;
    const listener = b.readUInt32BE(off + 1);
    const done = this.#closes.get(listener);
    this.#closes.delete(listener);
    done?.();
  }

  /** The helper exited: every listen fails with -1, every close is done. */
  exited(): void {
    for (const done of this.#listens.values()) done(-1, 0);
    this.#listens.clear();
    for (const done of this.#closes.values()) done();
    this.#closes.clear();
  }
}

/** The longest restart delay: a helper that keeps dying is retried every 5 s. */
export const MAX_RESTART_DELAY_MS = 5000;

/**
 * Watches a helper child: keeps the last 2 000 characters of its stderr, swallows the pipes'
 * errors (a dying child fails pending writes; its 'exit' reports it), and calls `onExit` once with
 * why it exited, stderr's tail included.
 */
export function superviseChild(
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

/**
 * Resolves with what the helper's hello says (its thread count; -1 when it exited first), once
 * `hello` is called; kills the child and rejects after `timeoutMs`, or when it cannot be run.
 */
export function awaitHello(
  child: ChildProcess,
  path: string,
  timeoutMs: number,
  protocol: HelperProtocol,
  onHello: (hello: (threads: number) => void) => void,
): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new NativeHelperError(`no hello within ${timeoutMs} ms`, { protocol }));
    }, timeoutMs);
    child.once('error', (cause) => {
      clearTimeout(timer);
      reject(new NativeHelperError(`cannot run ${path}: ${cause.message}`, { cause, protocol }));
    });
    onHello((threads) => {
      clearTimeout(timer);
      resolve(threads);
    });
  });
}

/**
 * Splits a stream's chunks into frames (a u32 big-endian length, then that many bytes) and hands
 * each whole one to `onFrame` as (buffer, offset of its first byte, length); an empty frame is
 * skipped. A partial frame waits for the next chunk.
 */
export class FrameReader {
  readonly #onFrame: (b: Buffer, off: number, len: number) => void;
  #carry: Buffer | undefined;

  constructor(onFrame: (b: Buffer, off: number, len: number) => void) {
    this.#onFrame = onFrame;
  }

  push(chunk: Buffer): void {
    const b = this.#carry === undefined ? chunk : Buffer.concat([this.#carry, chunk]);
    let off = 0;
    while (b.length - off >= 5) {
      const len = b.readUInt32BE(off);
      if (b.length - off - 4 < len) break;
      if (len > 0) this.#onFrame(b, off + 4, len);
      off += 4 + len;
    }
    this.#carry = off === b.length ? undefined : Buffer.from(b.subarray(off));
  }
}

/** The delay before each restart of a dying helper: `firstMs`, doubling up to 5 s, until reset. */
export class RestartBackoff {
  readonly #firstMs: number;
  #delay = 0;

  constructor(firstMs: number) {
    this.#firstMs = firstMs;
  }

  /** The next delay (and doubles the one after). */
  next(): number {
    this.#delay = Math.min(
      MAX_RESTART_DELAY_MS,
      this.#delay === 0 ? this.#firstMs : this.#delay * 2,
    );
    return this.#delay;
  }

  /** A restarted helper serves again: its next death starts from `firstMs`. */
  reset(): void {
    this.#delay = 0;
  }
}

/** An integer option of at least `min` (`d` when not given); else InvalidOptionError naming it. */
export function countOption(name: string, v: number | undefined, d: number, min: number): number {
  const n = v ?? d;
  if (!Number.isSafeInteger(n) || n < min) {
    throw new InvalidOptionError(name, `must be an integer of at least ${min}, got ${String(n)}`);
  }
  return n;
}

/**
 * What every helper child object shares (RelayHelper, UdpHelper): the supervised child, its
 * frames read from stdout, the hello, the listen and close replies, and the stop. A subclass
 * knows its own frames (`onFrame`, handing 'H', 'l' and 'x' to `commonFrame`) and how its
 * queued frames go out (`flush`).
 */
export abstract class HelperChild {
  /** Worker threads the helper runs. */
  readonly threads: number;
  protected readonly child: ChildProcess;
  /** Pending 'L' and 'X' of this helper. */
  protected readonly replies = new ListenerReplies();
  #exited = false;
  #onHello: ((threads: number) => void) | undefined;
  readonly #stderr: { stderrTail(): string };

  /** `exited` hears why the child exited, after every pending reply failed. */
  protected constructor(child: ChildProcess, threads: number, exited: (why: string) => void) {
    this.child = child;
    this.threads = threads;
    const reader = new FrameReader((b, off, len) => this.onFrame(b, off, len));
    child.stdout?.on('data', (chunk: Buffer) => reader.push(chunk));
    this.#stderr = superviseChild(child, (why) => {
      this.#exited = true;
      this.#onHello?.(-1);
      this.replies.exited();
      exited(why);
    });
  }

  /** The helper's process id (tests kill it). */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** True once the process is gone. */
  get isExited(): boolean {
    return this.#exited;
  }

  /** Stops the helper: its stdin closes, it exits, and every socket it holds goes with it. */
  stop(): void {
    if (this.#exited) return;
    this.flush();
    stopChild(this.child);
  }

  /** Waits for the hello (see awaitHello) and checks its thread count (see checkHello). */
  protected async hello(path: string, timeoutMs: number, protocol: HelperProtocol): Promise<void> {
    const threads = await awaitHello(this.child, path, timeoutMs, protocol, (hello) => {
      this.#onHello = (t) => {
        this.#onHello = undefined;
        hello(t);
      };
    });
    checkHello(threads, this.threads, protocol, this.#stderr.stderrTail, () => this.stop());
  }

  /** Handles 'H', 'l' and 'x', the frames every helper sends; other types are ignored. */
  protected commonFrame(b: Buffer, off: number, len: number): void {
    switch (b[off]) {
      case 0x6c: // 'l' listening
        this.replies.listening(b, off, len);
        return;
      case 0x78: // 'x' unlistened
        this.replies.unlistened(b, off, len);
        return;
      case 0x48: // 'H' hello
        if (len >= 9) this.#onHello?.(b.readUInt32BE(off + 1));
        return;
    }
  }

  /** One whole frame from stdout: `len` bytes at `off`, the type first. */
  protected abstract onFrame(b: Buffer, off: number, len: number): void;

  /** Writes the frames queued so far (stop calls it before stdin closes). */
  protected abstract flush(): void;
}

/**
 * Core's checks of a socket context the helper cannot make itself: `ctx.ip` an IP address (or
 * null) and `ctx.port` a port. Returns the socket's name ("ip:port/UDP") for SocketOpenError;
 * throws SocketOpenError when a check fails.
 */
export function checkContext(ctx: ProxySocketContext, protocol: HelperProtocol): string {
  const what = `${joinHostPort(ctx.ip ?? '*', ctx.port)}/${protocol}`;
  if (ctx.ip !== null && net.isIP(ctx.ip) === 0) {
    throw new SocketOpenError(what, { cause: new TypeError(`"${ctx.ip}" is not an IP address`) });
  }
  if (!Number.isInteger(ctx.port) || ctx.port < 0 || ctx.port > 65_535) {
    throw new SocketOpenError(what, { cause: new RangeError(`port ${ctx.port} is out of range`) });
  }
  return what;
}

/** The start options given (`undefined` ones left out, as exactOptionalPropertyTypes wants). */
export function startOptions(o: HelperStartOptions): HelperStartOptions {
  return {
    ...(o.helperPath !== undefined ? { helperPath: o.helperPath } : {}),
    ...(o.compiler !== undefined ? { compiler: o.compiler } : {}),
    ...(o.threads !== undefined ? { threads: o.threads } : {}),
    ...(o.startTimeoutMs !== undefined ? { startTimeoutMs: o.startTimeoutMs } : {}),
  };
}
