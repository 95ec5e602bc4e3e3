import { describe, expect, it } from 'vitest';
import { EndpointSliceMerger } from '../load-balancing/endpoint-slice-merger.js';
import { RoundRobinLoadBalancer } from '../load-balancing/load-balancer-round-robin.js';
import { mulberry32 } from '../load-balancing/random.js';
import type { EndpointSlice, Endpoints } from '../model/model.js';
import { spyLogger } from '../test-support/spy-logger.js';
import { EndpointsIntake } from './endpoints-intake.js';

const PORT = { namespace: 'ns', name: 'web', port: 'http' };

function endpoints(...ips: string[]): Endpoints {
  return {
    metadata: { namespace: 'ns', name: 'web' },
    subsets: [{ addresses: ips.map((ip) => ({ ip })), ports: [{ name: 'http', port: 80 }] }],
  };
}

function slice(name: string, ...ips: string[]): EndpointSlice {
  return {
    metadata: { namespace: 'ns', name, labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv4',
    endpoints: ips.map((ip) => ({ addresses: [ip] })),
    ports: [{ name: 'http', port: 80, protocol: 'TCP' }],
  };
}

function setup() {
  const lb = new RoundRobinLoadBalancer({ random: mulberry32(1) });
  lb.newService(PORT, 'None', 0);
  const intake = new EndpointsIntake(lb, spyLogger(), () => {});
  const served = () => [...lb.endpoints(PORT)].sort();
  return { lb, intake, served };
}

describe('EndpointsIntake: Endpoints and EndpointSlices of one Service', () => {
  it('keeps the slice’s endpoints when the legacy Endpoints object beside it is deleted', () => {
    const { intake, served } = setup();
    const legacy = endpoints('10.0.0.1');
    intake.onEndpointsAdd(legacy);
    intake.onEndpointSliceAdd(slice('web-a', '10.0.0.2'));
    intake.onEndpointsDelete(legacy);
    expect(served()).toEqual(['10.0.0.2:80']);
  });

  it('moves a Service from Endpoints to a slice in either order without an empty moment', () => {
    const { intake, served } = setup();
    const legacy = endpoints('10.0.0.1');
    intake.onEndpointsAdd(legacy);
    expect(served()).toEqual(['10.0.0.1:80']);
    // A manifest reload may delete the Endpoints first or add the slice first.
    intake.onEndpointSliceAdd(slice('web-a', '10.0.0.2'));
    expect(served()).toEqual(['10.0.0.2:80']);
    intake.onEndpointsDelete(legacy);
    expect(served()).toEqual(['10.0.0.2:80']);
  });

  it('ignores Endpoints objects for a Service that has slices, and falls back to them when the slices go', () => {
    const { intake, served } = setup();
    const s = slice('web-a', '10.0.0.2');
    intake.onEndpointSliceAdd(s);
    const legacy = endpoints('10.0.0.1');
    intake.onEndpointsAdd(legacy);
    expect(served()).toEqual(['10.0.0.2:80']);
    const legacy2 = endpoints('10.0.0.3');
    intake.onEndpointsUpdate(legacy, legacy2);
    expect(served()).toEqual(['10.0.0.2:80']);
    intake.onEndpointSliceDelete(s);
    expect(served()).toEqual(['10.0.0.3:80']);
    intake.onEndpointsDelete(legacy2);
    expect(served()).toEqual([]);
  });

  it('deletes nothing the slices gave when a malformed Endpoints delete names the Service', () => {
    const { intake, served } = setup();
    intake.onEndpointsAdd(endpoints('10.0.0.1'));
    intake.onEndpointSliceAdd(slice('web-a', '10.0.0.2'));
    intake.onEndpointsDelete({ metadata: { namespace: 'ns', name: 'web' }, subsets: 7 } as never);
    expect(served()).toEqual(['10.0.0.2:80']);
  });
});

describe('EndpointSliceMerger.servicesWithBothSources', () => {
  it('names each Service given both an Endpoints object and a slice, once', () => {
    const other = { ...endpoints('10.0.0.9'), metadata: { namespace: 'ns', name: 'db' } };
    const defaulted = { ...endpoints('10.0.0.9'), metadata: { name: 'api' } };
    const apiSlice = {
      ...slice('api-a', '10.0.0.8'),
      metadata: { name: 'api-a', labels: { 'kubernetes.io/service-name': 'api' } },
    };
    expect(
      EndpointSliceMerger.servicesWithBothSources(
        [endpoints('10.0.0.1'), other, defaulted],
        [slice('web-a', '10.0.0.2'), slice('web-b', '10.0.0.3'), apiSlice],
      ),
    ).toEqual(['ns/web', 'default/api']);
    expect(
      EndpointSliceMerger.servicesWithBothSources([other], [slice('web-a', '10.0.0.2')]),
    ).toEqual([]);
  });
});
