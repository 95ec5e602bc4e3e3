import type { Endpoints } from '../model/model.js';
import { validateEndpoints } from '../model/validation.js';
import { ConfigFanout, type ConfigOptions, type FanoutKind } from './config-fanout.js';
import type { EndpointsHandler } from './handlers.js';
import type { SharedInformer } from './informer.js';

const ENDPOINTS_KIND: FanoutKind<Endpoints, EndpointsHandler> = {
  kind: 'Endpoints',
  name: 'endpoints config',
  validate: validateEndpoints,
  add: (h, obj) => h.onEndpointsAdd(obj),
  update: (h, old, obj) => h.onEndpointsUpdate(old, obj),
  delete: (h, obj) => h.onEndpointsDelete(obj),
  synced: (h) => h.onEndpointsSynced(),
};

/**
 * Delivers legacy Endpoints from an informer to {@link EndpointsHandler}s: validated, in registration
 * order, with `onEndpointsSynced()` once the informer has synced. [pkg/proxy/config EndpointsConfig]
 * Use it, or an EndpointSliceConfig, not both: the Proxier would see every endpoint twice.
 */
export class EndpointsConfig extends ConfigFanout<Endpoints, EndpointsHandler> {
  /** Registers with `informer` at once, so no event is missed between construction and `run()`. */
  constructor(informer: SharedInformer<Endpoints>, options?: ConfigOptions) {
    super(informer, ENDPOINTS_KIND, options);
  }
}
