import type { EndpointSlice, Endpoints, Service } from '../model/model.js';

/** Receives Service changes, in order, from a ServiceConfig. */
export interface ServiceHandler {
  /** A Service appeared (or was listed). */
  onServiceAdd(service: Service): void;
  /** A Service changed; `oldService` is the object last delivered. A resync passes equal objects. */
  onServiceUpdate(oldService: Service, service: Service): void;
  /** A Service went away; `service` is its last delivered state. */
  onServiceDelete(service: Service): void;
  /** Called once, after the initial list of Services has been delivered. */
  onServiceSynced(): void;
}

/** Receives legacy Endpoints changes, in order, from an EndpointsConfig. */
export interface EndpointsHandler {
  /** An Endpoints object appeared (or was listed). */
  onEndpointsAdd(endpoints: Endpoints): void;
  /** An Endpoints object changed; `oldEndpoints` is the object last delivered. */
  onEndpointsUpdate(oldEndpoints: Endpoints, endpoints: Endpoints): void;
  /** An Endpoints object went away; `endpoints` is its last delivered state. */
  onEndpointsDelete(endpoints: Endpoints): void;
  /** Called once, after the initial list of Endpoints has been delivered. */
  onEndpointsSynced(): void;
}

/** Receives EndpointSlice changes, in order, from an EndpointSliceConfig. */
export interface EndpointSliceHandler {
  /** An EndpointSlice appeared (or was listed). */
  onEndpointSliceAdd(slice: EndpointSlice): void;
  /** An EndpointSlice changed; `oldSlice` is the object last delivered. */
  onEndpointSliceUpdate(oldSlice: EndpointSlice, slice: EndpointSlice): void;
  /** An EndpointSlice went away; `slice` is its last delivered state. */
  onEndpointSliceDelete(slice: EndpointSlice): void;
  /** Called once, after the initial list of EndpointSlices has been delivered. */
  onEndpointSlicesSynced(): void;
}
