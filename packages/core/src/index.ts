/**
 * The public surface of @userspace-proxy/core. Every export is named here on purpose: nothing
 * internal leaks through `export *`. Each section belongs to one area of the package.
 */

export type { AddressManager } from './hooks/address-manager.js';
export type { ConntrackCleaner } from './hooks/conntrack.js';
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
  CacheMutationError,
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
export type { EventRecorder, EventType } from './hooks/event-recorder.js';
export type { EndpointSliceHandler, EndpointsHandler, ServiceHandler } from './config/handlers.js';
// --- contracts ---
export type {
  DeletedFinalStateUnknown,
  InformerEventHandler,
  SharedInformer,
} from './config/informer.js';
export type { AffinityType, LoadBalancer } from './load-balancing/load-balancer.js';
export type { CreateLoggerOptions, Logger } from './logger.js';
export { componentLogger, createLogger, noopLogger } from './logger.js';
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
} from './model/model.js';
export { DEFAULT_CLIENT_IP_AFFINITY_SECONDS, SERVICE_NAME_LABEL } from './model/model.js';
export type { Portal, PortalKind, PortalManager } from './hooks/portal-manager.js';
export type { Proxier, ProxierOptions, ProxyMode } from './proxier/proxier.js';
export type { ProxySocket, ProxySocketFactory } from './sockets/proxy-socket.js';
export type { ProxySocketOptions } from './sockets/proxy-socket-options.js';
export { DEFAULT_PROXY_SOCKET_OPTIONS } from './sockets/proxy-socket-options.js';
export type { PortalAddress, ServiceInfo } from './model/service-info.js';
export type { ServicePortName } from './model/service-port-name.js';
export { joinHostPort, servicePortNameString, splitHostPort } from './model/service-port-name.js';

// --- validation and endpoint lists ---

export type { EndpointSliceMergerOptions } from './load-balancing/endpoint-slice-merger.js';
export { EndpointSliceMerger } from './load-balancing/endpoint-slice-merger.js';
export {
  buildPortsToEndpointsMap,
  isValidEndpointHost,
  isValidPort,
} from './load-balancing/endpoints-map.js';

// --- load balancer ---

export type { RoundRobinLoadBalancerOptions } from './load-balancing/load-balancer-round-robin.js';
export {
  DEFAULT_MAX_AFFINITY_RECORDS,
  RoundRobinLoadBalancer,
} from './load-balancing/load-balancer-round-robin.js';
export type { RandomSource } from './load-balancing/random.js';
export { mulberry32, shuffle, shuffled } from './load-balancing/random.js';

// --- port allocator and runner ---
export type { BoundedFrequencyRunnerOptions } from './proxier/bounded-frequency-runner.js';
export { BoundedFrequencyRunner } from './proxier/bounded-frequency-runner.js';
export type { PortAllocator, PortAllocatorOptions } from './ports/port-allocator.js';
export { newPortAllocator } from './ports/port-allocator.js';
export { OsPortAllocator } from './ports/port-allocator-os.js';
export { RangePortAllocator } from './ports/port-allocator-range.js';
export type { PortRange } from './ports/port-range.js';
export { formatPortRange, OS_CHOSEN_PORT_RANGE, parsePortRange } from './ports/port-range.js';

// --- informers and config fan-out ---
export type {
  CacheMutationDetectorOptions,
  IntervalTimers,
} from './config/cache-mutation-detector.js';
export {
  CACHE_MUTATION_DETECTOR_ENV,
  CacheMutationDetector,
  DEFAULT_MUTATION_CHECK_INTERVAL_MS,
  DEFAULT_MUTATION_MAX_WATCHED,
  findDifference,
  mutationDetectionFromEnv,
} from './config/cache-mutation-detector.js';
export type {
  ConfigOptions,
  FanoutKind,
  SyncedNotifier,
  TimeoutTimers,
} from './config/config-fanout.js';
export { ConfigFanout, DEFAULT_SYNC_POLL_INTERVAL_MS } from './config/config-fanout.js';
export { EndpointSliceConfig } from './config/endpoint-slice-config.js';
export { EndpointsConfig } from './config/endpoints-config.js';
export {
  NoopEndpointSliceHandler,
  NoopEndpointsHandler,
  NoopServiceHandler,
} from './config/handlers-noop.js';
export type { StaticInformerOptions } from './config/informer-static.js';
export { StaticInformer } from './config/informer-static.js';
export type { ObjectName } from './model/object-key.js';
export {
  DEFAULT_NAMESPACE,
  objectKey,
  splitObjectKey,
  tryObjectKey,
  tryObjectName,
  UNKNOWN_KEY,
} from './model/object-key.js';
export { ServiceConfig } from './config/service-config.js';
export type { ValidateOptions, ValidationResult } from './model/validation.js';
export {
  reportInvalidObject,
  validateEndpointSlice,
  validateEndpoints,
  validateService,
} from './model/validation.js';

// --- proxy sockets ---
export { MAX_ACCEPT_BACKOFF_MS } from './sockets/accept-backoff.js';
export type { ProxySocketFactoryOptions } from './sockets/proxy-socket-factory.js';
export { createProxySocketFactory, newProxySocket } from './sockets/proxy-socket-factory.js';
export type { ResolvedProxySocketOptions } from './sockets/proxy-socket-options.js';
export {
  DEFAULT_UDP_SERVICE_RECEIVE_BUFFER_BYTES,
  resolveProxySocketOptions,
} from './sockets/proxy-socket-options.js';
export type { TcpProxySocketOptions } from './sockets/proxy-socket-tcp.js';
export { MAX_CONNECTIONS_BEFORE_PROXY_LOOP, TcpProxySocket } from './sockets/proxy-socket-tcp.js';
export type { UdpProxySocketOptions } from './sockets/proxy-socket-udp.js';
export { UdpProxySocket } from './sockets/proxy-socket-udp.js';
export type { TcpRelayOptions } from './sockets/tcp-relay.js';
export {
  adoptAcceptedSocket,
  connectForRelay,
  RELAY_LARGE_BUFFER_BYTES,
  RELAY_ONREAD,
  RELAY_SHARED_BUFFER_BYTES,
  TcpRelay,
} from './sockets/tcp-relay.js';
export type { ConnectFn, TryConnectOptions } from './sockets/dial-endpoints.js';
export { DialTimeoutError, tryConnectEndpoints } from './sockets/dial-endpoints.js';
export { MAX_PENDING_BYTES, MAX_PENDING_DATAGRAMS } from './sockets/udp-session.js';

// --- proxier ---
export type { NetworkInterfacesFn, NodePortAddressEnv } from './proxier/node-port-addresses.js';
export {
  detectPrimaryIPs,
  parseCidr,
  parseNodePortAddresses,
  resolveNodePortAddresses,
} from './proxier/node-port-addresses.js';
export type { ClaimResult } from './proxier/node-port-claims.js';
export { claimKeyString, NodePortClaims } from './proxier/node-port-claims.js';
export { PROXIER_EVENT_REASONS } from './proxier/proxier-context.js';
export type { ProxierEnvironment } from './proxier/proxier-factory.js';
export {
  DEFAULT_PROXIER_OPTIONS,
  newCustomProxier,
  newProxier,
} from './proxier/proxier-factory.js';
export { MAX_RETRIES_PER_SYNC } from './proxier/mode.js';
export { shouldSkipService } from './proxier/service-port-spec.js';
export {
  CONNTRACK_CONCURRENCY,
  SYNC_BURST,
  SYNC_RUNNER_NAME,
  UserspaceProxier,
} from './proxier/proxier-userspace.js';
export type { ServiceChange } from './proxier/service-change-tracker.js';
export { ServiceChangeTracker } from './proxier/service-change-tracker.js';

// --- portals, conntrack, addresses, events ---
export { NoopAddressManager } from './hooks/address-manager-noop.js';
export { NoopConntrackCleaner } from './hooks/conntrack-noop.js';
export type {
  EmitterEventRecorderEvents,
  EmitterEventRecorderOptions,
  RecordedEvent,
} from './hooks/event-recorder-emitter.js';
export { EmitterEventRecorder } from './hooks/event-recorder-emitter.js';
export { NoopPortalManager } from './hooks/portal-manager-noop.js';
