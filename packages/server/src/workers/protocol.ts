import type {
  EndpointSlice,
  Endpoints,
  EventRecorder,
  ObjectReference,
  Service,
} from '@userspace-proxy/core';
import type { NeedPodsRequest } from '@userspace-proxy/idler';
import type { KubeProxyConfiguration } from '../config-schema.js';

/**
 * The messages between the primary and its workers over the cluster IPC channel (JSON). The primary
 * sends validated objects and requests; a worker answers and reports its syncs, events and unidle
 * requests. Every type starts with "up:" so that nothing else on the channel (prom-client's own
 * cluster messages) is mistaken for ours.
 */

/** An object event, as the primary's config fan-out delivered it. */
export type ObjectOp<T> =
  | { op: 'add'; obj: T }
  | { op: 'update'; old: T; obj: T }
  | { op: 'delete'; obj: T };

/** Which object kinds the primary forwards (the worker offers the same informers). */
export interface ForwardedKinds {
  endpointSlices: boolean;
  endpoints: boolean;
}

/** Primary → worker. */
export type ToWorker =
  | {
      type: 'up:init';
      /** 0-based; worker 0 also serves UDP, SCTP and idled Services. */
      index: number;
      config: KubeProxyConfiguration;
      kinds: ForwardedKinds;
      /** The node IPs the primary resolved for "primary" node ports. */
      nodeIPs?: string[];
      /** Whether the source has an unidle hook (a cluster); the worker forwards NeedPods then. */
      unidler: boolean;
    }
  | ({ type: 'up:service' } & ObjectOp<Service>)
  | ({ type: 'up:slice' } & ObjectOp<EndpointSlice>)
  | ({ type: 'up:endpoints' } & ObjectOp<Endpoints>)
  | { type: 'up:synced'; kind: 'service' | 'slice' | 'endpoints' }
  | { type: 'up:request'; id: number; what: 'metrics' | 'status' }
  /** `/debug/pprof/…?worker=K` (enableProfiling): a profile of this worker; `up:response` answers. */
  | { type: 'up:profile'; id: number; kind: 'cpu' | 'heap'; seconds: number }
  /** The client of `up:profile` `id` went away: stop sampling and answer now. */
  | { type: 'up:profile-stop'; id: number }
  | { type: 'up:drain' }
  | { type: 'up:stop-now' };

/** Worker → primary. */
export type FromWorker =
  | { type: 'up:ready' }
  /** `code`: the error class's stable code (a busy profiler's `ERR_PROFILER_BUSY`). */
  | { type: 'up:response'; id: number; body: unknown; error?: string; code?: string }
  | { type: 'up:sync'; durationMs: number; servicePorts: number }
  | {
      type: 'up:event';
      ref: ObjectReference;
      eventType: Parameters<EventRecorder['event']>[1];
      reason: string;
      message: string;
    }
  | { type: 'up:need-pods'; request: NeedPodsRequest };

/** True for one of our messages (anything else on the channel is ignored). */
export function isOurs(message: unknown): message is { type: string } {
  return (
    typeof message === 'object' &&
    message !== null &&
    typeof (message as { type?: unknown }).type === 'string' &&
    (message as { type: string }).type.startsWith('up:')
  );
}
