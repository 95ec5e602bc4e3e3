/**
 * The UDP helper's frame protocol as data: how it is built and run, what one listener asks of it,
 * what it reports, and the session ids' encoding. The frames themselves are written and parsed in
 * udp-helper.ts; the C source (native/udp-relay-helper.c) documents them.
 */
import { fileURLToPath } from 'node:url';
import { buildNativeHelper } from '@userspace-proxy/core/sockets';
import { NativeHelperError } from './errors.js';
import { MAX_THREADS } from './relay-protocol.js';

/** How the UDP helper is found and run. */
export interface UdpHelperOptions {
  /** A prebuilt helper binary. Default: `native/udp-relay-helper.c` compiled into `native/build/`. */
  readonly helperPath?: string;
  /** C compiler of the on-demand build. Default `cc`. */
  readonly compiler?: string;
  /** Event-loop threads of the helper (at most 64). Default 0: `os.availableParallelism()`. */
  readonly threads?: number;
  /** How long the helper may take to start and say hello, ms. Default 10 000. */
  readonly startTimeoutMs?: number;
}

/**
 * How a session ended, from the helper's 'c' frame: `refused` is Node's own verdict, `dial-failed`
 * an upstream socket that could not be made or connected.
 */
export const UDP_CLOSE_REASONS = [
  'idle',
  'closed',
  'error',
  'endpoint-removed',
  'refused',
  'dial-failed',
] as const;
/** One of {@link UDP_CLOSE_REASONS}, or `helper-exit` when the helper died under the session. */
export type UdpCloseReason = (typeof UDP_CLOSE_REASONS)[number] | 'helper-exit';

/** A session's counters as the helper reports them when it ends. */
export interface UdpSessionTotals {
  readonly datagramsIn: number;
  readonly bytesIn: number;
  readonly datagramsOut: number;
  readonly bytesOut: number;
  /** Datagrams of the session the helper dropped (queue full while waiting, full send buffer). */
  readonly dropped: number;
}

/** What the helper reports; udp-engine.ts implements it. */
export interface UdpHelperEvents {
  /** 'n': a new client waits for a verdict. */
  asked(session: number, listener: number, address: string, port: number): void;
  /** 'o': a new client took a pick made ahead (epoch of its ring, endpoint). */
  opened(
    session: number,
    listener: number,
    epoch: number,
    address: string,
    port: number,
    endpoint: string,
  ): void;
  /** 'c' */
  closed(session: number, totals: UdpSessionTotals, reason: UdpCloseReason, errno: number): void;
  /** 'd': datagrams dropped at the session caps and at full queues since the last report. */
  dropped(listener: number, atCap: number, queueFull: number): void;
  /** 'p' */
  picksTaken(listener: number, thread: number, epoch: number): void;
  exited(why: string): void;
}

/** What one listener asks of every helper thread (the 'L' frame). */
export interface UdpListenSpec {
  readonly address: string;
  readonly port: number;
  readonly idleMs: number;
  readonly maxSessions: number;
  readonly maxPerSource: number;
  readonly receiveBufferBytes: number;
  /** Receive and send buffer of each session's upstream socket; 0 keeps the OS default. */
  readonly sessionBufferBytes: number;
}

const SOURCE = fileURLToPath(new URL('../native/udp-relay-helper.c', import.meta.url));
const FLAGS = ['-O2', '-Wall', '-Wextra', '-Werror', '-pthread'] as const;

/** Compiles the UDP helper once per source version (core's `buildNativeHelper`). */
export function buildUdpRelayHelper(compiler = 'cc'): Promise<string> {
  return buildNativeHelper({
    source: SOURCE,
    outDir: fileURLToPath(new URL('../native/build/', import.meta.url)),
    name: 'udp-relay-helper',
    compiler,
    flags: FLAGS,
  }).catch((cause: unknown) => {
    throw new NativeHelperError(cause instanceof Error ? cause.message : String(cause), {
      cause,
      protocol: 'UDP',
    });
  });
}

/** The helper thread a session belongs to: its id's low 6 bits. */
export function sessionThread(session: number): number {
  return session % MAX_THREADS;
}
