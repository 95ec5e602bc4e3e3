/**
 * The root of @userspace-proxy/core: the contracts, the defaults and the factories that embedding
 * the proxy needs. Two subpaths hold the rest of the public surface: `@userspace-proxy/core/sockets`,
 * the building blocks for authors of proxy sockets (the default sockets as classes, the relay, the
 * dialer, back-off, the idle wheel, a standalone socket context), and
 * `@userspace-proxy/core/diagnostics`, the diagnostics channel names and message shapes that
 * metrics and status pages subscribe to. Tuning constants stay internal. Every name is listed on
 * purpose (no `export *`), and a test lists them all, so a new export is a decision.
 */

// --- model: the Kubernetes-shaped objects the proxy reads ---
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
export { objectKey } from './model/object-key.js';
export type { PortalAddress, ServiceInfo } from './model/service-info.js';
export type { ServicePortName } from './model/service-port-name.js';
export { servicePortNameString } from './model/service-port-name.js';
export type { ValidateOptions, ValidationResult } from './model/validation.js';
export { validateEndpointSlice, validateEndpoints, validateService } from './model/validation.js';

// --- errors: each with a stable `code` ---
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

// --- logging (diagnostics channels: @userspace-proxy/core/diagnostics) ---
export type { CreateLoggerOptions, Logger } from './logger.js';
export { componentLogger, createLogger, noopLogger } from './logger.js';

// --- informers and config fan-out ---
export type { IntervalTimers } from './config/cache-mutation-detector.js';
export type { ConfigOptions, TimeoutTimers } from './config/config-fanout.js';
export { EndpointSliceConfig } from './config/endpoint-slice-config.js';
export { EndpointsConfig } from './config/endpoints-config.js';
export type {
  EndpointSliceHandler,
  EndpointsHandler,
  ServiceHandler,
} from './config/handlers.js';
export type {
  DeletedFinalStateUnknown,
  InformerEventHandler,
  SharedInformer,
} from './config/informer.js';
export type { StaticInformerOptions } from './config/informer-static.js';
export { StaticInformer } from './config/informer-static.js';
export { ServiceConfig } from './config/service-config.js';

// --- load balancing ---
export type { AffinityType, LoadBalancer } from './load-balancing/load-balancer.js';
export type { RoundRobinLoadBalancerOptions } from './load-balancing/load-balancer-round-robin.js';
export type { OutlierEjectionOptions } from './load-balancing/outlier-ejection.js';
export type { RandomSource } from './load-balancing/random.js';
export { RoundRobinLoadBalancer } from './load-balancing/load-balancer-round-robin.js';

// --- the Proxier ---
export type { Proxier, ProxierOptions, ProxyMode } from './proxier/proxier.js';
export type { DrainResult } from './proxier/proxier-context.js';
export { PROXIER_EVENT_REASONS } from './proxier/proxier-context.js';
export type { ProxierEnvironment } from './proxier/proxier-factory.js';
export {
  DEFAULT_PROXIER_OPTIONS,
  newCustomProxier,
  newProxier,
} from './proxier/proxier-factory.js';
export type { NetworkInterfacesFn } from './proxier/node-port-addresses.js';
export { detectPrimaryIPs, parseCidr } from './proxier/node-port-addresses.js';
export type { PortRange } from './ports/port-range.js';
export { parsePortRange } from './ports/port-range.js';

// --- proxy sockets: the extension point ---
export type {
  AcceptedConnection,
  AcceptedConnectionState,
  AcceptPolicy,
  AcceptPolicyFactory,
  AcceptVerdict,
} from './sockets/accept-policy.js';
export { PROXY_EVERY_CONNECTION } from './sockets/accept-policy.js';
export type {
  EndpointsChange,
  EndpointsChangedListener,
  ProxySocket,
  ProxySocketContext,
  ProxySocketFactory,
} from './sockets/proxy-socket.js';
export type { ProxySocketFactoryOptions } from './sockets/proxy-socket-factory.js';
export { createProxySocketFactory, newProxySocket } from './sockets/proxy-socket-factory.js';
export type { ProxySocketOptions } from './sockets/proxy-socket-options.js';
export { DEFAULT_PROXY_SOCKET_OPTIONS } from './sockets/proxy-socket-options.js';

// --- hooks: contracts and their no-op defaults (Linux implementations: @userspace-proxy/linux) ---
export type { AddressManager } from './hooks/address-manager.js';
export { NoopAddressManager } from './hooks/address-manager-noop.js';
export type { ConntrackCleaner } from './hooks/conntrack.js';
export { NoopConntrackCleaner } from './hooks/conntrack-noop.js';
export type { EventRecorder, EventType } from './hooks/event-recorder.js';
export type {
  EmitterEventRecorderEvents,
  EmitterEventRecorderOptions,
  RecordedEvent,
} from './hooks/event-recorder-emitter.js';
export { EmitterEventRecorder } from './hooks/event-recorder-emitter.js';
export type { Portal, PortalKind, PortalManager } from './hooks/portal-manager.js';
export { NoopPortalManager } from './hooks/portal-manager-noop.js';
