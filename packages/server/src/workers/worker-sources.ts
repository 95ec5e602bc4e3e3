import {
  type EndpointSlice,
  type Endpoints,
  type Logger,
  type Service,
  StaticInformer,
} from '@userspace-proxy/core';
import type { ProxySources } from '../sources.js';
import type { FromWorker, ObjectOp, ToWorker } from './protocol.js';

/**
 * A worker's sources: in-memory informers fed by the primary's messages, so the worker's daemon
 * runs the same config fan-out and Proxier as a single process does. Events go to the primary's
 * recorder and NeedPods requests to the primary's unidle hook (the cluster client lives there).
 */

/** The sources and the function that applies one message from the primary. */
export interface WorkerSources {
  sources: ProxySources;
  /** Applies an object or synced message; false for any other message. */
  apply(message: ToWorker): boolean;
}

/** Builds the sources of the worker described by `init`. */
export function createWorkerSources(
  init: Extract<ToWorker, { type: 'up:init' }>,
  send: (message: FromWorker) => void,
  logger: Logger,
): WorkerSources {
  const services = new StaticInformer<Service>({ synced: false, kind: 'Service', logger });
  const slices = init.kinds.endpointSlices
    ? new StaticInformer<EndpointSlice>({ synced: false, kind: 'EndpointSlice', logger })
    : undefined;
  const endpoints = init.kinds.endpoints
    ? new StaticInformer<Endpoints>({ synced: false, kind: 'Endpoints', logger })
    : undefined;
  const apply = <T>(informer: StaticInformer<T> | undefined, op: ObjectOp<T>) => {
    if (informer === undefined) return;
    if (op.op === 'add') informer.add(op.obj);
    else if (op.op === 'update') informer.update(op.obj);
    else informer.delete(op.obj);
  };
  /** Messages that came before `run`; undefined once it ran. */
  let held: ToWorker[] | undefined = [];
  const deliver = (m: ToWorker) => {
    switch (m.type) {
      case 'up:service':
        return apply(services, m);
      case 'up:slice':
        return apply(slices, m);
      case 'up:endpoints':
        return apply(endpoints, m);
      case 'up:synced':
        return (
          m.kind === 'service' ? services : m.kind === 'slice' ? slices : endpoints
        )?.markSynced();
      default:
        return;
    }
  };
  const sources: ProxySources = {
    services,
    ...(slices ? { endpointSlices: slices } : {}),
    ...(endpoints ? { endpoints } : {}),
    ...(init.nodeIPs ? { nodeIPs: () => [...(init.nodeIPs ?? [])] } : {}),
    recorder: {
      event(ref, eventType, reason, message) {
        // The primary records its own Starting event; one per worker would repeat it.
        if (reason === 'Starting') return;
        send({ type: 'up:event', ref, eventType, reason, message });
      },
    },
    run: (signal) => {
      // The daemon registers every handler before it calls run: only now may objects flow (a
      // config fan-out registers on its informer when made, its handlers later).
      const queued = held ?? [];
      held = undefined;
      for (const m of queued) deliver(m);
      return new Promise((resolve) => {
        if (signal.aborted) resolve();
        signal.addEventListener('abort', () => resolve(), { once: true });
      });
    },
    ...(init.unidler
      ? {
          createUnidler: () => ({
            // Without its signal: an AbortSignal does not cross the IPC channel (it arrives as
            // `{}`, and the unidler's addEventListener on it threw), so the primary's scale-up
            // runs until it is done, moot or not.
            needPods: ({ service, servicePort }) =>
              send({ type: 'up:need-pods', request: { service, servicePort } }),
            close: async () => {},
          }),
        }
      : {}),
  };
  return {
    sources,
    apply(m) {
      if (!['up:service', 'up:slice', 'up:endpoints', 'up:synced'].includes(m.type)) return false;
      if (held) held.push(m);
      else deliver(m);
      return true;
    },
  };
}
