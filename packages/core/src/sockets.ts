/**
 * `@userspace-proxy/core/sockets`: the building blocks for authors of proxy sockets. The root entry
 * point holds the contracts, defaults and factories most users need (an accept policy on the
 * default TCP socket covers counting, limiting and idling); this one is for people who write a
 * ProxySocket of their own, or test one without a Proxier: the default sockets as classes, a
 * standalone socket context, the TCP relay and endpoint dialer, accept back-off, the idle wheel,
 * the log limiter, refusal classification, and host:port helpers. The channels a socket publishes
 * on are in `@userspace-proxy/core/diagnostics`.
 * Named exports only: a new export is a decision (a test lists them).
 */

export type { ProxyProtocolVersion } from './model/proxy-protocol-annotation.js';
export { PROXY_PROTOCOL_ANNOTATION } from './model/proxy-protocol-annotation.js';
export { joinHostPort, splitHostPort, splitHostPortText } from './model/service-port-name.js';
export { AcceptBackoff, MAX_ACCEPT_BACKOFF_MS } from './sockets/accept-backoff.js';
export type {
  ConnectFn,
  DialCallback,
  DialClient,
  DialOptions,
  TryConnectOptions,
} from './sockets/dial-endpoints.js';
export { DialTimeoutError, dialEndpoints, tryConnectEndpoints } from './sockets/dial-endpoints.js';
export type { ListeningSocket } from './sockets/listening-socket.js';
export { LogLimiter } from './sockets/log-limiter.js';
export type { NativeHelperBuild } from './sockets/native-build.js';
export { buildNativeHelper } from './sockets/native-build.js';
export type { ProxyProtocolEndpoint } from './sockets/proxy-protocol.js';
export { encodeProxyHeader } from './sockets/proxy-protocol.js';
export type { ResolvedProxySocketOptions } from './sockets/proxy-socket-options.js';
export type { TcpProxySocketOptions } from './sockets/proxy-socket-tcp.js';
export { TcpProxySocket } from './sockets/proxy-socket-tcp.js';
export type { UdpProxySocketOptions } from './sockets/proxy-socket-udp.js';
export { UdpProxySocket } from './sockets/proxy-socket-udp.js';
export { isNoEndpointsError, refusalReason } from './sockets/refusal.js';
export { SilenceWheel, type Silent } from './sockets/silence-wheel.js';
export type {
  SocketContextOptions,
  StandaloneServiceInfo,
  StandaloneSocketContext,
} from './sockets/socket-context.js';
export { createServiceInfo, createSocketContext } from './sockets/socket-context.js';
export { sourceRangeCheck } from './sockets/source-ranges.js';
export { relayReadPathCounts } from './sockets/tcp-read-path.js';
export type { TcpRelayOptions } from './sockets/tcp-relay.js';
export { TcpRelay } from './sockets/tcp-relay.js';
