import type { Service, ServicePortName } from '@userspace-proxy/core';

/** What an idling socket says when a Service port needs pods. */
export interface NeedPodsRequest {
  /** The Service as the socket was opened with; its annotations name what to scale. */
  service: Service;
  /** The port whose clients wait. */
  servicePort: ServicePortName;
  /** Aborted when the request is moot: the port got endpoints, or holds nobody any more. */
  signal?: AbortSignal;
}

/**
 * Asks for pods when an idled Service port is used, beside the NeedPods Event (which OpenShift's
 * unidling controller watches). `@userspace-proxy/kubernetes` implements it as `KubernetesUnidler`,
 * which scales the `unidle-targets` back up itself. Must not block and should not throw (a throw
 * is logged and counted).
 */
export interface UnidleHook {
  /** Called at the start of each idle period of a Service port and again every interval. */
  needPods(request: NeedPodsRequest): void;
}
