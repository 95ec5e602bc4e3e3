/**
 * What every native helper process needs from Node, whatever it relays: the child's stderr kept
 * for the exit message, no unhandled 'error' from a dying child's pipes, the wait for its hello,
 * length-prefixed frames read from chunks, and the restart back-off. The UDP helper uses these;
 * the TCP helper (relay-helper.ts, engine.ts) carries its own copies written before them.
 */
import type { ChildProcess } from 'node:child_process';
import { InvalidOptionError } from '@userspace-proxy/core';
import { NativeHelperError } from './errors.js';

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
  protocol: 'TCP' | 'UDP',
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
