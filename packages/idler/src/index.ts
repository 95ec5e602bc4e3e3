/**
 * @userspace-proxy/idler: keep a Service's address answering while it is scaled to zero. The idling
 * sockets hold TCP clients (bounded per Service port, across the proxy, and in time), drop or buffer
 * UDP datagrams, ask for pods (a NeedPods Event and a pluggable hook), and hand the held clients
 * over when endpoints come; the HybridProxier moves each Service between a main proxier and the
 * idling one. Built on core's public surface only. Named exports only.
 */

export type {
  IdlerHandOverFailedMessage,
  IdlerHoldMessage,
  IdlerLabels,
  IdlerNeedPodsMessage,
  IdlerReleaseMessage,
  IdlerReleaseOutcome,
  IdlerUdpMessage,
} from './diagnostics.js';
export { IDLER_CHANNELS } from './diagnostics.js';
export type { HybridProxierOptions } from './hybrid-proxier.js';
export { HybridProxier } from './hybrid-proxier.js';
export { IDLED_AT_ANNOTATION, isIdledService } from './idling-predicates.js';
export type { IdlerConfig, IdlerStats } from './idler.js';
export { Idler } from './idler.js';
export { IdlerBudget } from './idler-budget.js';
export type { IdlingProxySocketFactoryOptions } from './idling-socket-factory.js';
export { createIdlingProxySocketFactory } from './idling-socket-factory.js';
export { IdlingUdpProxySocket } from './idling-udp-socket.js';
export { NEED_PODS_REASON, needPodsMessage } from './need-pods.js';
export type { IdlerCounters } from './hold-queue.js';
export type { NeedPodsSignaller } from './need-pods.js';
export type { IdlerOptions, ResolvedIdlerOptions } from './options.js';
export { DEFAULT_IDLER_OPTIONS } from './options.js';
export type { NeedPodsRequest, UnidleHook } from './unidle-hook.js';
