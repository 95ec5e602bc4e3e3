/**
 * The public surface of @userspace-proxy/kubernetes: Kubernetes sources for the proxy, built from
 * `@kubernetes/client-node` informers (or from the integrator's own), a flood-protected
 * Kubernetes event recorder, and the unidler that scales an idled Service's workloads back up.
 * Every export is named on purpose.
 */

export type { BackoffOptions } from './backoff.js';
export { Backoff, DEFAULT_BACKOFF } from './backoff.js';
export type {
  CoreV1EventBody,
  CorrelationResult,
  EventCorrelatorOptions,
  EventPatch,
} from './event-correlator.js';
export { COMBINED_PREFIX, DEFAULT_EVENT_CORRELATOR, EventCorrelator } from './event-correlator.js';
export type {
  EventRecorderStats,
  KubernetesEventRecorderOptions,
} from './event-recorder-kubernetes.js';
export { KubernetesEventRecorder } from './event-recorder-kubernetes.js';
export type { EventSink } from './event-sink.js';
export { clientNodeEventSink } from './event-sink.js';
export { FilteringInformer } from './filtering-informer.js';
export type { GuardedWatchOptions, WatchCallback } from './guarded-watch.js';
export { GuardedWatch } from './guarded-watch.js';
export type { ClientNodeInformer, InformerAdapterOptions } from './informer-adapter.js';
export {
  ClientNodeInformerAdapter,
  DEFAULT_RESYNC_PERIOD_MS,
  fromClientNodeInformer,
} from './informer-adapter.js';
export type { KubeConfigSource } from './kube-config.js';
export { loadKubeConfig, SERVICE_ACCOUNT_DIR, TOKEN_FILE_AUTH_PROVIDER } from './kube-config.js';
export type {
  GuardedInformer,
  GuardedInformerOptions,
  InformerSpec,
  KubeInformerOptions,
} from './kube-informer.js';
export { createGuardedInformer, createKubeInformer } from './kube-informer.js';
export type { ListPagerStats, ListResult, PagedList, PagedListOptions } from './list-pager.js';
export { ApiStatusError, makePagedList } from './list-pager.js';
export { ListLimitError } from './list-errors.js';
export { RequestTimeoutError } from './request-timeout.js';
export type { ObjectTransform } from './object-transform.js';
export {
  endpointSliceTransform,
  LAST_APPLIED_ANNOTATION,
  stripUnreadFields,
  validatingTransform,
} from './object-transform.js';
export type { NodeLike } from './node-info.js';
export { isNodeEligible, NodeInfo, nodeIPsOf, TO_BE_DELETED_TAINT } from './node-info.js';
export type { KeyedObject } from './object-validation.js';
export {
  HEADLESS_LABEL,
  isProxiedEndpoints,
  isProxiedService,
  matchesProxyLabels,
  nodeFieldSelector,
  PROXY_LABEL_SELECTOR,
  SERVICE_FIELD_SELECTOR,
  SERVICE_PROXY_NAME_LABEL,
} from './selectors.js';
export type { Labelled } from './selectors.js';
export type {
  KubernetesSources,
  KubernetesSourcesOptions,
  ProvidedInformer,
} from './sources.js';
export { createKubernetesSources } from './sources.js';
export type { Timers } from './timers.js';
export type { JsonPatchOperation, ScaleObject, UnidleClient } from './unidle-client.js';
export { clientNodeUnidleClient } from './unidle-client.js';
export type {
  ParsedUnidleTargets,
  UnidleTarget,
  UnidleTargetKind,
  UnidleTargetsLimits,
} from './unidle-targets.js';
export {
  DEFAULT_UNIDLE_TARGETS_LIMITS,
  IDLED_AT_ANNOTATION,
  InvalidUnidleTargetsError,
  parseUnidleTargets,
  UNIDLE_TARGET_RESOURCES,
  UNIDLE_TARGETS_ANNOTATION,
} from './unidle-targets.js';
export type {
  KubernetesUnidlerOptions,
  NeedPodsRequest,
  UnidlerStats,
} from './unidler-options.js';
export { DEFAULT_UNIDLER_LIMITS } from './unidler-options.js';
export { KubernetesUnidler } from './unidler.js';
