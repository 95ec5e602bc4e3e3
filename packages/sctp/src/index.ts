/**
 * `@userspace-proxy/sctp`: an SCTP engine in TypeScript (RFC 9260 essentials) over RFC 6951 UDP
 * encapsulation, behind the {@link SctpEngine} interface the proxy socket uses.
 */
export type {
  AssociationState,
  SctpAssociationCounters,
  SctpAssociationEvents,
  SctpCloseInfo,
  SctpCloseReason,
  SctpMessage,
  SctpOutboundMessage,
} from './association-types.js';
export { crc32c, sctpChecksum, verifySctpChecksum } from './crc32c.js';
export type { DatagramSocket, SctpEndpointCounters } from './endpoint.js';
export {
  DEFAULT_ENCAPSULATION_PORT,
  type SctpAssociation,
  type SctpConnectOptions,
  type SctpEngine,
  type SctpListener,
  type SctpListenerEvents,
  type SctpListenOptions,
} from './engine.js';
export {
  createUserspaceSctpEngine,
  type UserspaceSctpEngineOptions,
  UserspaceSctpEngine,
} from './engine-userspace.js';
export {
  SctpAssociationError,
  SctpConnectError,
  SctpError,
  SctpInvalidStreamError,
  SctpLimitError,
  SctpMessageSizeError,
  SctpNotWritableError,
  SctpSendBufferFullError,
} from './errors.js';
export {
  type ResolvedAssociationOptions,
  resolveAssociationOptions,
  type SctpAssociationOptions,
} from './options.js';
export {
  createSctpProxySocketFactory,
  limitedWarnings,
  type SctpProxySocketCounters,
  SctpProxySocket,
  type SctpProxySocketOptions,
  type WithSctpOptions,
  withSctp,
} from './proxy-socket-sctp.js';
export type { InboundMessage } from './reassembly.js';
export {
  relayAssociations,
  type SctpRelay,
  type SctpRelayCounters,
  type SctpRelayResult,
} from './relay.js';
export { defaultTimers, type SctpTimers, type TimerHandle } from './timers.js';
export {
  createRawSctpEngine,
  RawSctpEngine,
  type RawSctpEngineOptions,
  SctpRawIpv4OnlyError,
} from './transport-raw.js';
export {
  nodeUdpSockets,
  type UdpSocketEvents,
  type UdpSocketHandle,
  type UdpSocketOpenOptions,
  type UdpSocketProvider,
} from './transport-udp.js';
export {
  buildUdpHelper,
  SctpUdpHelperError,
  SctpUdpSocketError,
  type UdpHelperCounters,
  type UdpHelperOptions,
} from './transport-udp-helper.js';
export {
  buildRawHelper,
  type RawHelperCounters,
  type RawHelperOptions,
  SctpRawHelperError,
  SctpRawPermissionError,
  SctpRawSocketError,
} from './transport-raw-helper.js';
