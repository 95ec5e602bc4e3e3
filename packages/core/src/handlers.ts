import type { EndpointSlice, Endpoints, Service } from './model.js';

/** Receives Service changes, in order, from a ServiceConfig. */
export interface ServiceHandler {
  onServiceAdd(service: Service): void;
  onServiceUpdate(oldService: Service, service: Service): void;
  onServiceDelete(service: Service): void;
  /** Called once, after the initial list of Services has been delivered. */
  onServiceSynced(): void;
}

/** Receives legacy Endpoints changes, in order, from an EndpointsConfig. */
export interface EndpointsHandler {
  onEndpointsAdd(endpoints: Endpoints): void;
  onEndpointsUpdate(oldEndpoints: Endpoints, endpoints: Endpoints): void;
  onEndpointsDelete(endpoints: Endpoints): void;
  /** Called once, after the initial list of Endpoints has been delivered. */
  onEndpointsSynced(): void;
}

/** Receives EndpointSlice changes, in order, from an EndpointSliceConfig. */
export interface EndpointSliceHandler {
  onEndpointSliceAdd(slice: EndpointSlice): void;
  onEndpointSliceUpdate(oldSlice: EndpointSlice, slice: EndpointSlice): void;
  onEndpointSliceDelete(slice: EndpointSlice): void;
  /** Called once, after the initial list of EndpointSlices has been delivered. */
  onEndpointSlicesSynced(): void;
}
