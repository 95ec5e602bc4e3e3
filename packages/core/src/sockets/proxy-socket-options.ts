import { InvalidOptionError } from '../errors.js';

/**
 * Tuning of the default TCP and UDP proxy sockets. Every limit has a default, documented with its
 * reason in docs/api.md ("Proxy sockets") and, as daemon settings, in docs/operations.md; hitting one
 * is logged and counted on a diagnostics channel, never a crash.
 */
export interface ProxySocketOptions {
  /** Timeout of each dial attempt, in order; one attempt per entry. Default [250, 500, 1000, 2000]. */
  dialTimeoutsMs?: readonly number[];
  /** TCP: the most connections one socket proxies at once; further clients are refused. Default 0 = no limit. */
  maxConnections?: number;
  /** TCP: close a connection idle in both directions for this long. Default 0 = never. */
  idleTimeoutMs?: number;
  /**
   * TCP: once one side has sent its FIN, the connection is reset after the remaining direction has
   * been idle this long, so nothing lingers in FIN_WAIT2/CLOSE_WAIT. Default 60 000; 0 = never.
   */
  halfCloseTimeoutMs?: number;
  /** TCP keep-alive initial delay on both legs. Default 15 000; 0 disables keep-alive. */
  keepAliveMs?: number;
  /** TCP accept errors such as EMFILE pause accepting for this long, doubling up to 1 s. Default 50. */
  acceptBackoffMs?: number;
  /** UDP: the most concurrent client sessions per socket. Default 4096. */
  maxUdpSessions?: number;
  /**
   * UDP: the most concurrent sessions of one client IP address (any ports) per socket, so that one
   * source sending from many ports cannot take every session and lock new clients out for the idle
   * timeout. Default 0: a quarter of `maxUdpSessions`, rounded up (1 024 of 4 096). Raise it when
   * many clients share one address (a NAT); set it to `maxUdpSessions` to turn the share off.
   */
  maxUdpSessionsPerSource?: number;
  /**
   * UDP: receive/send buffer size of each socket, bytes. Default 0: session sockets keep the OS
   * default, and the Service's socket, which every client's datagrams land on, asks for a receive
   * buffer of {@link DEFAULT_UDP_SERVICE_RECEIVE_BUFFER_BYTES}.
   */
  udpBufferBytes?: number;
  /**
   * TCP: bytes read at most from a client an accept policy holds; beyond them the client is no
   * longer read (TCP backpressure) until it is handed over. Reading them is what notices a client
   * that gives up while held. Default 65 536.
   */
  holdBufferBytes?: number;
}

/**
 * The receive buffer the Service's UDP socket asks for when `udpBufferBytes` is 0. Every client's
 * datagrams queue there while the event loop is busy elsewhere, and on a host where the proxy
 * shares its cores with its clients and backends that is milliseconds at a time: with the OS
 * default (208 KiB, about 280 small datagrams as the kernel accounts them) 4–7 % of datagrams were
 * lost at 50 000/s on a 2-core host (docs/benchmarks.md). The kernel caps the request at `net.core.rmem_max`
 * (4 MiB on this project's machines; 208 KiB on a stock kernel, where raising it is the remedy);
 * the memory is used only while datagrams wait.
 */
export const DEFAULT_UDP_SERVICE_RECEIVE_BUFFER_BYTES = 4 * 1024 * 1024;

/** The defaults of {@link ProxySocketOptions}, for documentation and for implementations. */
export const DEFAULT_PROXY_SOCKET_OPTIONS = {
  dialTimeoutsMs: [250, 500, 1000, 2000],
  maxConnections: 0,
  idleTimeoutMs: 0,
  halfCloseTimeoutMs: 60_000,
  keepAliveMs: 15_000,
  acceptBackoffMs: 50,
  maxUdpSessions: 4096,
  maxUdpSessionsPerSource: 0,
  udpBufferBytes: 0,
  holdBufferBytes: 65_536,
} as const satisfies Required<ProxySocketOptions>;

/** {@link ProxySocketOptions} with every default filled in, as the default sockets use them. */
export type ResolvedProxySocketOptions = {
  readonly [K in keyof ProxySocketOptions]-?: Exclude<ProxySocketOptions[K], undefined>;
};

/**
 * Fills in defaults and checks every option, so that a bad value fails when the factory is made
 * rather than on the first connection.
 * @throws InvalidOptionError naming the option.
 */
export function resolveProxySocketOptions(
  opts: ProxySocketOptions = {},
): ResolvedProxySocketOptions {
  const d = DEFAULT_PROXY_SOCKET_OPTIONS;
  const dialTimeoutsMs = opts.dialTimeoutsMs ?? d.dialTimeoutsMs;
  if (
    !Array.isArray(dialTimeoutsMs) ||
    dialTimeoutsMs.length === 0 ||
    !dialTimeoutsMs.every((t) => typeof t === 'number' && Number.isFinite(t) && t > 0)
  ) {
    throw new InvalidOptionError('dialTimeoutsMs', 'must be a non-empty list of positive numbers');
  }
  const count = (name: keyof ProxySocketOptions, value: number | undefined, fallback: number) => {
    const v = value ?? fallback;
    if (!Number.isSafeInteger(v) || v < 0) {
      throw new InvalidOptionError(name, `must be a non-negative integer, got ${String(v)}`);
    }
    return v;
  };
  const duration = (
    name: keyof ProxySocketOptions,
    value: number | undefined,
    fallback: number,
  ) => {
    const v = value ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
      throw new InvalidOptionError(name, `must be a non-negative number of ms, got ${String(v)}`);
    }
    return v;
  };
  const maxUdpSessions = count('maxUdpSessions', opts.maxUdpSessions, d.maxUdpSessions);
  if (maxUdpSessions === 0) throw new InvalidOptionError('maxUdpSessions', 'must be at least 1');
  return {
    dialTimeoutsMs: [...dialTimeoutsMs],
    maxConnections: count('maxConnections', opts.maxConnections, d.maxConnections),
    idleTimeoutMs: duration('idleTimeoutMs', opts.idleTimeoutMs, d.idleTimeoutMs),
    halfCloseTimeoutMs: duration(
      'halfCloseTimeoutMs',
      opts.halfCloseTimeoutMs,
      d.halfCloseTimeoutMs,
    ),
    keepAliveMs: duration('keepAliveMs', opts.keepAliveMs, d.keepAliveMs),
    acceptBackoffMs: Math.max(
      1,
      duration('acceptBackoffMs', opts.acceptBackoffMs, d.acceptBackoffMs),
    ),
    maxUdpSessions,
    maxUdpSessionsPerSource: Math.min(
      maxUdpSessions,
      count('maxUdpSessionsPerSource', opts.maxUdpSessionsPerSource, d.maxUdpSessionsPerSource) ||
        Math.ceil(maxUdpSessions / 4),
    ),
    udpBufferBytes: count('udpBufferBytes', opts.udpBufferBytes, d.udpBufferBytes),
    holdBufferBytes: Math.max(1, count('holdBufferBytes', opts.holdBufferBytes, d.holdBufferBytes)),
  };
}
