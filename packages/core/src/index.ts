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
  CacheMutationError,
  CleanupError,
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

export type { EndpointSliceMergerOptions } from './endpoint-slice-merger.js';
export { EndpointSliceMerger } from './endpoint-slice-merger.js';
export { buildPortsToEndpointsMap, isValidEndpointHost, isValidPort } from './endpoints-map.js';

// --- load balancer ---

export type { RoundRobinLoadBalancerOptions } from './load-balancer-round-robin.js';
export {
  DEFAULT_MAX_AFFINITY_RECORDS,
  RoundRobinLoadBalancer,
} from './load-balancer-round-robin.js';
export type { RandomSource } from './random.js';
export { mulberry32, shuffle, shuffled } from './random.js';

// --- port allocator and runner ---
export type { BoundedFrequencyRunnerOptions } from './bounded-frequency-runner.js';
export { BoundedFrequencyRunner } from './bounded-frequency-runner.js';
export type { PortAllocator, PortAllocatorOptions } from './port-allocator.js';
export { newPortAllocator } from './port-allocator.js';
export { OsPortAllocator } from './port-allocator-os.js';
export { RangePortAllocator } from './port-allocator-range.js';
export type { PortRange } from './port-range.js';
export { formatPortRange, OS_CHOSEN_PORT_RANGE, parsePortRange } from './port-range.js';

// --- informers and config fan-out ---
export type {
  CacheMutationDetectorOptions,
  IntervalTimers,
} from './cache-mutation-detector.js';
export {
  CACHE_MUTATION_DETECTOR_ENV,
  CacheMutationDetector,
  DEFAULT_MUTATION_CHECK_INTERVAL_MS,
  DEFAULT_MUTATION_MAX_WATCHED,
  findDifference,
  mutationDetectionFromEnv,
} from './cache-mutation-detector.js';
export type {
  ConfigOptions,
  FanoutKind,
  SyncedNotifier,
  TimeoutTimers,
} from './config-fanout.js';
export { ConfigFanout, DEFAULT_SYNC_POLL_INTERVAL_MS } from './config-fanout.js';
export { EndpointSliceConfig } from './endpoint-slice-config.js';
export { EndpointsConfig } from './endpoints-config.js';
export {
  NoopEndpointSliceHandler,
  NoopEndpointsHandler,
  NoopServiceHandler,
} from './handlers-noop.js';
export type { StaticInformerOptions } from './informer-static.js';
export { StaticInformer } from './informer-static.js';
export type { ObjectName } from './object-key.js';
export {
  DEFAULT_NAMESPACE,
  objectKey,
  splitObjectKey,
  tryObjectKey,
  tryObjectName,
  UNKNOWN_KEY,
} from './object-key.js';
export { ServiceConfig } from './service-config.js';
export type { ValidateOptions, ValidationResult } from './validation.js';
export {
  reportInvalidObject,
  validateEndpointSlice,
  validateEndpoints,
  validateService,
} from './validation.js';

// --- proxy sockets ---
export { MAX_ACCEPT_BACKOFF_MS } from './accept-backoff.js';
export type { ProxySocketFactoryOptions } from './proxy-socket-factory.js';
export { createProxySocketFactory, newProxySocket } from './proxy-socket-factory.js';
export type { ResolvedProxySocketOptions } from './proxy-socket-options.js';
export {
  DEFAULT_UDP_SERVICE_RECEIVE_BUFFER_BYTES,
  resolveProxySocketOptions,
} from './proxy-socket-options.js';
export type { TcpProxySocketOptions } from './proxy-socket-tcp.js';
export { MAX_CONNECTIONS_BEFORE_PROXY_LOOP, TcpProxySocket } from './proxy-socket-tcp.js';
export type { UdpProxySocketOptions } from './proxy-socket-udp.js';
export { UdpProxySocket } from './proxy-socket-udp.js';
export type { TcpRelayOptions } from './tcp-relay.js';
export {
  adoptAcceptedSocket,
  connectForRelay,
  RELAY_LARGE_BUFFER_BYTES,
  RELAY_ONREAD,
  RELAY_SHARED_BUFFER_BYTES,
  TcpRelay,
} from './tcp-relay.js';
export type { ConnectFn, TryConnectOptions } from './try-connect-endpoints.js';
export { DialTimeoutError, tryConnectEndpoints } from './try-connect-endpoints.js';
export { MAX_PENDING_BYTES, MAX_PENDING_DATAGRAMS } from './udp-session.js';

// --- proxier ---
export type { NetworkInterfacesFn, NodePortAddressEnv } from './node-port-addresses.js';
export {
  detectPrimaryIPs,
  parseCidr,
  parseNodePortAddresses,
  resolveNodePortAddresses,
} from './node-port-addresses.js';
export type { ClaimResult } from './node-port-claims.js';
export { claimKeyString, NodePortClaims } from './node-port-claims.js';
export { PROXIER_EVENT_REASONS } from './proxier-context.js';
export type { ProxierEnvironment } from './proxier-factory.js';
export { DEFAULT_PROXIER_OPTIONS, newCustomProxier, newProxier } from './proxier-factory.js';
export { MAX_RETRIES_PER_SYNC } from './proxier-mode.js';
export { shouldSkipService } from './proxier-service-port.js';
export {
  CONNTRACK_CONCURRENCY,
  SYNC_BURST,
  SYNC_RUNNER_NAME,
  UserspaceProxier,
} from './proxier-userspace.js';
export type { ServiceChange } from './service-change-tracker.js';
export { ServiceChangeTracker } from './service-change-tracker.js';

// --- portals, conntrack, addresses, events ---
export { NoopAddressManager } from './address-manager-noop.js';
export type { IpAddressManagerOptions } from './address-manager-ip.js';
export { IpAddressManager, parseIpAddrShow } from './address-manager-ip.js';
export type {
  CommandResult,
  CommandRunner,
  ExecCommandRunnerOptions,
} from './command-runner.js';
export {
  COMMAND_NOT_FOUND_CODE,
  DEFAULT_COMMAND_RUNNER_OPTIONS,
  ExecCommandRunner,
  isCommandNotFound,
  prefixedCommandRunner,
} from './command-runner.js';
export type { ExecConntrackCleanerOptions } from './conntrack-exec.js';
export { ExecConntrackCleaner } from './conntrack-exec.js';
export { NoopConntrackCleaner } from './conntrack-noop.js';
export type {
  EmitterEventRecorderEvents,
  EmitterEventRecorderOptions,
  RecordedEvent,
} from './event-recorder-emitter.js';
export { EmitterEventRecorder } from './event-recorder-emitter.js';
export type {
  IptablesRule,
  IptablesTable,
  JumpRule,
  PortalRuleOptions,
} from './iptables-rules.js';
export { IPTABLES_CHAINS, JUMP_RULES, portalRules } from './iptables-rules.js';
export type { IptablesPortalManagerOptions } from './portal-manager-iptables.js';
export { DEFAULT_IPTABLES_OPTIONS, IptablesPortalManager } from './portal-manager-iptables.js';
export { NoopPortalManager } from './portal-manager-noop.js';
