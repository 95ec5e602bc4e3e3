import type { Service } from '../model/model.js';
import { validateService } from '../model/validation.js';
import { ConfigFanout, type ConfigOptions, type FanoutKind } from './config-fanout.js';
import type { ServiceHandler } from './handlers.js';
import type { SharedInformer } from './informer.js';

const SERVICE_KIND: FanoutKind<Service, ServiceHandler> = {
  kind: 'Service',
  name: 'service config',
  validate: validateService,
  add: (h, obj) => h.onServiceAdd(obj),
  update: (h, old, obj) => h.onServiceUpdate(old, obj),
  delete: (h, obj) => h.onServiceDelete(obj),
  synced: (h) => h.onServiceSynced(),
};

/**
 * Delivers Services from an informer to {@link ServiceHandler}s (the Proxier, an integrator's own):
 * validated, in registration order, with `onServiceSynced()` once the informer has synced.
 * [pkg/proxy/config ServiceConfig] Register handlers before the informer delivers objects.
 */
export class ServiceConfig extends ConfigFanout<Service, ServiceHandler> {
  /** Registers with `informer` at once, so no event is missed between construction and `run()`. */
  constructor(informer: SharedInformer<Service>, options?: ConfigOptions) {
    super(informer, SERVICE_KIND, options);
  }
}
