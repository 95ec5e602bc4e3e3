import { describe, expect, it } from 'vitest';
import type { Service } from '../model/model.js';
import {
  NoopEndpointSliceHandler,
  NoopEndpointsHandler,
  NoopServiceHandler,
} from './handlers-noop.js';
import { StaticInformer } from './informer-static.js';
import { ServiceConfig } from './service-config.js';

describe('no-op handlers', () => {
  it('accept every call and can be extended to override one method', () => {
    const svc: Service = { metadata: { name: 'a' }, spec: {} };
    const seen: string[] = [];
    class AddsOnly extends NoopServiceHandler {
      override onServiceAdd(s: Service): void {
        seen.push(s.metadata.name);
      }
    }
    const informer = new StaticInformer<Service>();
    const config = new ServiceConfig(informer);
    config.registerEventHandler(new AddsOnly());
    config.registerEventHandler(new NoopServiceHandler());
    informer.add(svc);
    informer.update({ ...svc, spec: { clusterIP: '10.0.0.1' } });
    informer.delete(svc);
    expect(seen).toEqual(['a']);

    const eps = new NoopEndpointsHandler();
    const slices = new NoopEndpointSliceHandler();
    const e = { metadata: { name: 'a' } };
    const s = { metadata: { name: 'a' }, addressType: 'IPv4' as const, endpoints: [] };
    expect(() => {
      eps.onEndpointsAdd(e);
      eps.onEndpointsUpdate(e, e);
      eps.onEndpointsDelete(e);
      eps.onEndpointsSynced();
      slices.onEndpointSliceAdd(s);
      slices.onEndpointSliceUpdate(s, s);
      slices.onEndpointSliceDelete(s);
      slices.onEndpointSlicesSynced();
    }).not.toThrow();
  });
});
