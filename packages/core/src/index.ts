/**
 * The public surface of @userspace-proxy/core. Every export is named here on purpose: nothing
 * internal leaks through `export *`. Each section belongs to one area of the package.
 */

export type { AddressManager } from './address-manager.js';
export type { ConntrackCleaner } from './conntrack.js';
export type {
  AcceptErrorMessage,
  ConnectionCloseMessage,
  ConnectionOpenMessage,
  DialErrorMessage,
  ObjectRejectedMessage,
  RefusedMessage,
  ServiceChangeMessage,
  ServiceLabels,
  SyncMessage,
  UdpSessionCloseMessage,
  UdpSessionMessage,
} from './diagnostics.js';
export { CHANNELS } from './diagnostics.js';
export {
  CommandError,
  ConntrackError,
  EndpointDialError,
  InvalidObjectError,
  InvalidOptionError,
  InvalidPortRangeError,
  LimitReachedError,
  MalformedSourceAddressError,
  MissingEndpointsError,
  MissingServiceEntryError,
  PortAllocationError,
  PortalError,
  PortConflictError,
  ProxyError,
  ProxyOnLocalhostError,
  SocketOpenError,
  UnsupportedProtocolError,
} from './errors.js';
export type { EventRecorder, EventType } from './event-recorder.js';
export type { EndpointSliceHandler, EndpointsHandler, ServiceHandler } from './handlers.js';
// --- contracts ---
export type { DeletedFinalStateUnknown, InformerEventHandler, SharedInformer } from './informer.js';
export type { AffinityType, LoadBalancer } from './load-balancer.js';
export type { Logger } from './logger.js';
export { componentLogger, noopLogger } from './logger.js';
// --- model ---
export type {
  Addr,
  EndpointAddress,
  EndpointConditions,
  EndpointPort,
  EndpointSlice,
  Endpoints,
  ObjectMeta,
  ObjectReference,
  Protocol,
  Service,
  ServicePort,
  ServiceType,
} from './model.js';
export { DEFAULT_CLIENT_IP_AFFINITY_SECONDS, SERVICE_NAME_LABEL } from './model.js';
export type { Portal, PortalKind, PortalManager } from './portal-manager.js';
export type { Proxier, ProxierOptions, ProxyMode } from './proxier.js';
export type { ProxySocket, ProxySocketFactory } from './proxy-socket.js';
export type { ProxySocketOptions } from './proxy-socket-options.js';
export { DEFAULT_PROXY_SOCKET_OPTIONS } from './proxy-socket-options.js';
export type { PortalAddress, ServiceInfo } from './service-info.js';
export type { ServicePortName } from './service-port-name.js';
export { joinHostPort, servicePortNameString, splitHostPort } from './service-port-name.js';

// --- validation and endpoint lists ---

// --- load balancer ---

// --- port allocator and runner ---

// --- informers and config fan-out ---

// --- proxy sockets ---

// --- proxier ---

// --- portals, conntrack, addresses, events ---
