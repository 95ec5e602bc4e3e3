/**
 * Tuning of the default TCP and UDP proxy sockets. Every limit has a default documented in
 * docs/operations.md; hitting one is logged and counted on a diagnostics channel, never a crash.
 */
export interface ProxySocketOptions {
  /** Timeout of each dial attempt, in order; one attempt per entry. Default [250, 500, 1000, 2000]. */
  dialTimeoutsMs?: readonly number[];
  /** TCP: the most connections one socket proxies at once; further clients are refused. Default 0 = no limit. */
  maxConnections?: number;
  /** TCP: close a connection idle in both directions for this long. Default 0 = never. */
  idleTimeoutMs?: number;
  /** TCP: after one side half-closes, how long the other direction may go on. Default 60 000. */
  halfCloseTimeoutMs?: number;
  /** TCP keep-alive initial delay on both legs. Default 15 000; 0 disables keep-alive. */
  keepAliveMs?: number;
  /** TCP accept errors such as EMFILE pause accepting for this long, doubling up to 1 s. Default 50. */
  acceptBackoffMs?: number;
  /** UDP: the most concurrent client sessions per socket. Default 4096. */
  maxUdpSessions?: number;
  /** UDP: receive/send buffer size of each socket, bytes. Default: the OS default. */
  udpBufferBytes?: number;
}

/** The defaults of {@link ProxySocketOptions}, for documentation and for implementations. */
export const DEFAULT_PROXY_SOCKET_OPTIONS = {
  dialTimeoutsMs: [250, 500, 1000, 2000],
  maxConnections: 0,
  idleTimeoutMs: 0,
  halfCloseTimeoutMs: 60_000,
  keepAliveMs: 15_000,
  acceptBackoffMs: 50,
  maxUdpSessions: 4096,
  udpBufferBytes: 0,
} as const satisfies Required<ProxySocketOptions>;
