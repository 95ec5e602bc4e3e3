import {
  type EndpointSlice,
  type EndpointSliceHandler,
  type Endpoints,
  type EndpointsHandler,
  objectKey,
  type Service,
  type ServiceHandler,
} from '@userspace-proxy/core';
import type { ProxyMetrics } from './metrics.js';

/**
 * Handlers the daemon registers beside the Proxier on each config fan-out: they count endpoint
 * changes (and their programming latency) for metrics, and keep the set of current Services, which
 * tells the metrics which per-Service series belong to Services that are gone. They see the same
 * validated objects as the Proxier, after it.
 */

/** The observers and what they know. */
export interface SourceObservers {
  services: ServiceHandler;
  endpointSlices: EndpointSliceHandler;
  endpoints: EndpointsHandler;
  /** "ns/name" of every Service currently known. */
  currentServices(): ReadonlySet<string>;
}

/** Creates the observers for `metrics`. */
export function observeSources(metrics: ProxyMetrics): SourceObservers {
  const current = new Set<string>();
  const keyOf = (service: Service) => {
    try {
      return objectKey(service);
    } catch {
      return undefined;
    }
  };
  const changed = (obj: EndpointSlice | Endpoints) => metrics.endpointChanged(obj);
  return {
    services: {
      onServiceAdd: (s) => {
        const key = keyOf(s);
        if (key !== undefined) current.add(key);
      },
      onServiceUpdate: () => {},
      onServiceDelete: (s) => {
        const key = keyOf(s);
        if (key !== undefined) current.delete(key);
      },
      onServiceSynced: () => {},
    },
    endpointSlices: {
      onEndpointSliceAdd: changed,
      onEndpointSliceUpdate: (old, slice) => {
        if (old !== slice) changed(slice);
      },
      onEndpointSliceDelete: changed,
      onEndpointSlicesSynced: () => {},
    },
    endpoints: {
      onEndpointsAdd: changed,
      onEndpointsUpdate: (old, endpoints) => {
        if (old !== endpoints) changed(endpoints);
      },
      onEndpointsDelete: changed,
      onEndpointsSynced: () => {},
    },
    currentServices: () => current,
  };
}
