import type { EndpointSlice, Endpoints, Service } from '../model/model.js';
import type { EndpointSliceHandler, EndpointsHandler, ServiceHandler } from './handlers.js';

/**
 * Handlers that ignore everything. They exist so a component can implement only part of a handler
 * interface by extending one (override the methods you need), and so a config fan-out can be given a
 * placeholder where a mode does not consume a kind (the reference's NoopEndpointSliceHandler).
 */

/** A {@link ServiceHandler} that does nothing; extend it and override what you need. */
export class NoopServiceHandler implements ServiceHandler {
  onServiceAdd(_service: Service): void {}
  onServiceUpdate(_oldService: Service, _service: Service): void {}
  onServiceDelete(_service: Service): void {}
  onServiceSynced(): void {}
}

/** An {@link EndpointsHandler} that does nothing; extend it and override what you need. */
export class NoopEndpointsHandler implements EndpointsHandler {
  onEndpointsAdd(_endpoints: Endpoints): void {}
  onEndpointsUpdate(_oldEndpoints: Endpoints, _endpoints: Endpoints): void {}
  onEndpointsDelete(_endpoints: Endpoints): void {}
  onEndpointsSynced(): void {}
}

/** An {@link EndpointSliceHandler} that does nothing; extend it and override what you need. */
export class NoopEndpointSliceHandler implements EndpointSliceHandler {
  onEndpointSliceAdd(_slice: EndpointSlice): void {}
  onEndpointSliceUpdate(_oldSlice: EndpointSlice, _slice: EndpointSlice): void {}
  onEndpointSliceDelete(_slice: EndpointSlice): void {}
  onEndpointSlicesSynced(): void {}
}
