import type { EndpointSlice } from '../model/model.js';
import { validateEndpointSlice } from '../model/validation.js';
import { ConfigFanout, type ConfigOptions, type FanoutKind } from './config-fanout.js';
import type { EndpointSliceHandler } from './handlers.js';
import type { SharedInformer } from './informer.js';

const ENDPOINT_SLICE_KIND: FanoutKind<EndpointSlice, EndpointSliceHandler> = {
  kind: 'EndpointSlice',
  name: 'endpoint slice config',
  validate: validateEndpointSlice,
  add: (h, obj) => h.onEndpointSliceAdd(obj),
  update: (h, old, obj) => h.onEndpointSliceUpdate(old, obj),
  delete: (h, obj) => h.onEndpointSliceDelete(obj),
  synced: (h) => h.onEndpointSlicesSynced(),
};

/**
 * Delivers EndpointSlices from an informer to {@link EndpointSliceHandler}s: validated (a slice
 * without a `kubernetes.io/service-name` label is rejected), in registration order, with
 * `onEndpointSlicesSynced()` once the informer has synced. [pkg/proxy/config EndpointSliceConfig]
 */
export class EndpointSliceConfig extends ConfigFanout<EndpointSlice, EndpointSliceHandler> {
  /** Registers with `informer` at once, so no event is missed between construction and `run()`. */
  constructor(informer: SharedInformer<EndpointSlice>, options?: ConfigOptions) {
    super(informer, ENDPOINT_SLICE_KIND, options);
  }
}
