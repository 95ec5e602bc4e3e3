/**
 * `@userspace-proxy/native`: an opt-in native TCP data path. A C helper process (epoll, splice(2),
 * one event loop per core) accepts and relays; Node keeps the endpoint choice through core's dial
 * schedule. Use it with {@link withNativeTcp} around a factory; see docs/native.md.
 */
export type { NativeTcpCounters } from './engine.js';
export { errnoError, NativeHelperError, NativeUnsupportedError } from './errors.js';
export {
  type NativeTcpFactory,
  type NativeTcpOptions,
  withNativeTcp,
} from './native-factory.js';
export {
  buildRelayHelper,
  type CloseHow,
  type RelayHelperOptions,
} from './relay-protocol.js';
export type { NativeUdpCounters } from './udp-engine.js';
export { type NativeUdpFactory, type NativeUdpOptions, withNativeUdp } from './udp-factory.js';
export {
  buildUdpRelayHelper,
  type UdpCloseReason,
  type UdpHelperOptions,
} from './udp-protocol.js';
export type { NativeUdpSession } from './udp-proxy-socket.js';
