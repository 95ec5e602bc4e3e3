import {
  type EndpointSlice,
  type Service,
  ServiceConfig,
  type ServiceHandler,
  validateEndpointSlice,
  validateService,
} from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import { type ClientNodeInformer, ClientNodeInformerAdapter } from './informer-adapter.js';
import {
  endpointSliceTransform,
  LAST_APPLIED_ANNOTATION,
  stripUnreadFields,
  validatingTransform,
} from './object-transform.js';

const parsed = () => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: {
    name: 'a',
    namespace: 'ns',
    resourceVersion: '7',
    managedFields: [{ manager: 'kubectl', fieldsV1: { 'f:spec': {} } }],
    annotations: { [LAST_APPLIED_ANNOTATION]: '{"big":"json"}', keep: 'me' },
  },
  spec: { clusterIP: '10.0.0.1', ports: [{ port: 80 }] },
});

describe('stripUnreadFields', () => {
  it('drops managedFields and the last-applied annotation, and nothing else', () => {
    const obj = parsed();
    expect(stripUnreadFields(obj)).toBe(obj);
    expect(obj.metadata).toEqual({
      name: 'a',
      namespace: 'ns',
      resourceVersion: '7',
      annotations: { keep: 'me' },
    });
  });

  it('leaves anything that is not an object alone and never throws', () => {
    for (const value of [null, undefined, 3, 'x', [], { metadata: null }]) {
      expect(stripUnreadFields(value)).toBe(value);
    }
    const hostile = {
      get metadata(): never {
        throw new Error('no');
      },
    };
    expect(stripUnreadFields(hostile)).toBe(hostile);
  });
});

describe('validatingTransform', () => {
  const transform = validatingTransform(validateService);

  it("replaces a valid object by core's validated copy, which core's fan-out delivers as it is", () => {
    const obj = transform(parsed()) as Service;
    expect((obj.metadata as unknown as Record<string, unknown>).managedFields).toBeUndefined();
    expect(obj.spec.ports?.[0]?.protocol).toBe('TCP'); // the validator's defaulting
    expect(validateService(obj, { reuse: true })).toEqual({ ok: true, value: obj });
  });

  it('keeps an invalid object as parsed, for the fan-out to reject and report', () => {
    const bad = { metadata: { name: 'b', namespace: 'ns' }, spec: { clusterIP: 'nope' } };
    expect(transform(bad)).toBe(bad);
  });

  it('leaves one object per key between the informer cache, its adapter and the fan-out', () => {
    const listeners: Record<string, ((obj: Service) => void)[]> = {};
    const informer: ClientNodeInformer<Service> = {
      on: (verb: string, cb: (obj: Service) => void) => {
        listeners[verb] = [...(listeners[verb] ?? []), cb];
      },
      off: () => {},
      start: async () => {},
      stop: async () => {},
    } as unknown as ClientNodeInformer<Service>;
    const adapter = new ClientNodeInformerAdapter<Service>(informer, { resyncPeriodMs: 0 });
    const config = new ServiceConfig(adapter);
    const seen: Service[] = [];
    const handler: ServiceHandler = {
      onServiceAdd: (s) => seen.push(s),
      onServiceUpdate: (_o, s) => seen.push(s),
      onServiceDelete: () => {},
      onServiceSynced: () => {},
    };
    config.registerEventHandler(handler);
    const cached = transform(parsed()) as Service;
    for (const cb of listeners.add ?? []) cb(cached);
    expect(adapter.get('ns/a')).toBe(cached);
    expect(seen).toEqual([cached]);
    expect(seen[0]).toBe(cached);
  });
});

describe('endpointSliceTransform', () => {
  const transform = endpointSliceTransform(validateEndpointSlice);
  const slice = (conditions: unknown[]) => ({
    metadata: {
      name: 's',
      namespace: 'ns',
      labels: { 'kubernetes.io/service-name': 'a' },
      managedFields: [{}],
    },
    addressType: 'IPv4',
    endpoints: conditions.map((c, i) => ({
      addresses: [`10.0.0.${i + 1}`],
      ...(c === undefined ? {} : { conditions: c }),
    })),
    ports: [{ name: 'http', port: 80, protocol: 'TCP' }],
  });

  it('shares one frozen conditions object per combination, across slices', () => {
    const up = { ready: true, serving: true, terminating: false };
    const a = transform(slice([up, { ...up }, { ready: false }, undefined])) as EndpointSlice;
    const b = transform(slice([{ ...up }])) as EndpointSlice;
    const [e0, e1, e2, e3] = a.endpoints;
    expect(e0?.conditions).toEqual(up);
    expect(e0?.conditions).toBe(e1?.conditions);
    expect(e0?.conditions).toBe(b.endpoints[0]?.conditions);
    expect(Object.isFrozen(e0?.conditions)).toBe(true);
    expect(e2?.conditions).toEqual({ ready: false });
    expect(e3 && 'conditions' in e3).toBe(false);
    expect(validateEndpointSlice(a, { reuse: true })).toEqual({ ok: true, value: a });
  });

  it('leaves conditions it does not know alone, and an invalid slice as parsed', () => {
    const odd = { ready: true, future: 'x' };
    const a = transform(slice([odd])) as EndpointSlice;
    expect(a.endpoints[0]?.conditions).toEqual(odd);
    expect(Object.isFrozen(a.endpoints[0]?.conditions)).toBe(false);
    const bad = { ...slice([]), addressType: 'nope' };
    expect(transform(bad)).toBe(bad);
  });

  it('keeps the repeated strings it shares (kind, apiVersion, nodeName, zone) as they were', () => {
    const parsedSlice = {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      ...slice([]),
      endpoints: [
        { addresses: ['10.0.0.1'], nodeName: 'node-1', zone: 'z1' },
        { addresses: ['10.0.0.2'], nodeName: 'node-1' },
        { addresses: ['10.0.0.3'], nodeName: 7 },
      ],
    };
    const out = transform(parsedSlice) as EndpointSlice;
    expect(out.apiVersion).toBe('discovery.k8s.io/v1');
    expect(out.kind).toBe('EndpointSlice');
    expect(out.endpoints.map((e) => [e.nodeName, e.zone])).toEqual([
      ['node-1', 'z1'],
      ['node-1', undefined],
      [7, undefined],
    ]);
  });
});
