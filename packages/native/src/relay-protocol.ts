/**
 * The helper's frame protocol as data: how it is built and run, the limits it enforces, what it
 * reports, and the encodings shared by both directions (connection ids, thread numbers). The
 * frames themselves are written and parsed in relay-helper.ts; the C source documents them.
 */
import { constants } from 'node:os';
import { fileURLToPath } from 'node:url';
import { buildNativeHelper } from '@userspace-proxy/core/sockets';
import { NativeHelperError } from './errors.js';

/** How the helper is found and run. */
export interface RelayHelperOptions {
  /** A prebuilt helper binary. Default: `native/tcp-relay-helper.c` compiled into `native/build/`. */
  readonly helperPath?: string;
  /** C compiler of the on-demand build. Default `cc`. */
  readonly compiler?: string;
  /** Event-loop threads of the helper (at most 64). Default 0: `os.availableParallelism()`. */
  readonly threads?: number;
  /** How long the helper may take to start and say hello, ms. Default 10 000. */
  readonly startTimeoutMs?: number;
}

/** The limits a helper enforces (the 'S' frame). */
export interface RelayLimits {
  readonly maxConnections: number;
  readonly keepAliveMs: number;
  readonly idleTimeoutMs: number;
  readonly halfCloseTimeoutMs: number;
}

/** How a relayed connection ended, from the helper's 'c' frame. */
export const CLOSE_HOW = [
  'done',
  'client-reset',
  'endpoint-reset',
  'closed',
  'reset',
  'idle-timeout',
  'half-close-timeout',
  'error',
] as const;
/** One of {@link CLOSE_HOW}, or `helper-exit` when the helper died under the connection. */
export type CloseHow = (typeof CLOSE_HOW)[number] | 'helper-exit';

/** What the helper reports; engine.ts implements it. */
export interface RelayHelperEvents {
  /**
   * `pick` is set when the helper dialled a pick made ahead ('P') as attempt 1: the epoch of the
   * ring it came from and the endpoint ("ip:port" parts). Its 'd' follows.
   */
  accepted(
    conn: number,
    listener: number,
    address: string,
    port: number,
    pickEpoch: number,
    pickHost: string,
    pickPort: number,
  ): void;
  refused(listener: number): void;
  acceptError(listener: number, errno: number): void;
  dialed(conn: number, attempt: number, errno: number): void;
  /** 'p': thread `thread`'s ring for `listener` holds epoch `epoch`'s picks from now on. */
  picksTaken(listener: number, thread: number, epoch: number): void;
  /** 'h': a held client's buffer holds `bytes`; `eof` once it sent its FIN. */
  held(conn: number, bytes: number, eof: boolean): void;
  closed(conn: number, bytesIn: number, bytesOut: number, how: CloseHow): void;
  /** Node wrote one pipe's queued command frames (counted: one write per pipe and turn). */
  wrote(): void;
  exited(why: string): void;
}

/** How 'C' closes: FIN, RST, or an accept policy's refusal (RST when the client is unanswered). */
export type CloseMode = 'fin' | 'reset' | 'refuse';

/** The most threads a helper runs: a connection id names its thread in 6 bits. */
export const MAX_THREADS = 64;

/** Picks a helper thread holds per listener (RING in the C source). */
export const PICK_RING = 64;

const SOURCE = fileURLToPath(new URL('../native/tcp-relay-helper.c', import.meta.url));
const FLAGS = ['-O2', '-Wall', '-Wextra', '-Werror', '-pthread'] as const;

/** Compiles the helper once per source version (core's `buildNativeHelper`). */
export function buildRelayHelper(compiler = 'cc'): Promise<string> {
  return buildNativeHelper({
    source: SOURCE,
    outDir: fileURLToPath(new URL('../native/build/', import.meta.url)),
    name: 'tcp-relay-helper',
    compiler,
    flags: FLAGS,
  }).catch((cause: unknown) => {
    throw new NativeHelperError(cause instanceof Error ? cause.message : String(cause), { cause });
  });
}

let errnoNames: Map<number, string> | undefined;

/** Name of an errno number (`ECONNREFUSED`), or `errno N`. */
export function errnoName(n: number): string {
  if (errnoNames === undefined) {
    errnoNames = new Map();
    for (const [name, v] of Object.entries(constants.errno)) {
      if (!errnoNames.has(v)) errnoNames.set(v, name);
    }
  }
  return errnoNames.get(n) ?? `errno ${n}`;
}

/** The pipe of a connection's thread: its id's low 6 bits name the thread. */
export function threadPipe(conn: number): number {
  return 1 + (conn % MAX_THREADS);
}

/** The helper thread a connection belongs to. */
export function connThread(conn: number): number {
  return conn % MAX_THREADS;
}

/** A u64 id as two u32 (ids stay below 2^53, so a number holds them exactly). */
export function writeId(f: Buffer, at: number, id: number): void {
  f.writeUInt32BE(Math.floor(id / 0x1_0000_0000), at);
  f.writeUInt32BE(id >>> 0, at + 4);
}

export function readId(b: Buffer, at: number): number {
  return b.readUInt32BE(at) * 0x1_0000_0000 + b.readUInt32BE(at + 4);
}
