import { describe, expect, it } from 'vitest';
import { InvalidObjectError } from '../errors.js';
import { validateEndpointSlice, validateEndpoints, validateService } from './validation.js';

function service(spec: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) {
  return {
    metadata: { name: 'web', namespace: 'ns' },
    spec: { clusterIP: '10.0.0.1', ports: [{ name: 'http', port: 80 }], ...spec },
    ...extra,
  };
}

/** The reason of a rejection, failing the test when the object was accepted. */
function reasonOf(result: { ok: true } | { ok: false; error: InvalidObjectError }): string {
  if (result.ok) throw new Error('expected a rejection');
  expect(result.error).toBeInstanceOf(InvalidObjectError);
  expect(result.error.code).toBe('ERR_INVALID_OBJECT');
  return result.error.reason;
}

describe('validateService', () => {
  it('accepts a well-formed Service and defaults protocol', () => {
    const r = validateService(service());
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.value.metadata).toEqual({ name: 'web', namespace: 'ns' });
    expect(r.value.spec.ports).toEqual([{ name: 'http', port: 80, protocol: 'TCP' }]);
  });

  it('defaults the namespace on a copy, never mutating the input', () => {
    const input = { metadata: { name: 'web' }, spec: { ports: [{ port: 53, protocol: 'UDP' }] } };
    const before = structuredClone(input);
    const r = validateService(input);
    expect(r.ok && r.value.metadata.namespace).toBe('default');
    expect(input).toEqual(before);
    if (!r.ok) return;
    expect(r.value.metadata).not.toBe(input.metadata);
    expect(r.value.spec.ports).not.toBe(input.spec.ports);
    expect(r.value.spec.ports?.[0]).not.toBe(input.spec.ports[0]);
  });

  it('treats an empty or null namespace as "default" and keeps unknown fields', () => {
    for (const namespace of ['', null]) {
      const r = validateService({
        metadata: { name: 'a', namespace, labels: { x: 'y' }, extra: 1 },
        spec: { type: 'NodePort', weird: true },
        apiVersion: 'v1',
      });
      expect(r.ok).toBe(true);
      if (!r.ok) return;
      expect(r.value.metadata).toEqual({
        name: 'a',
        namespace: 'default',
        labels: { x: 'y' },
        extra: 1,
      });
      expect(r.value.spec).toEqual({ type: 'NodePort', weird: true });
      expect(r.value.apiVersion).toBe('v1');
    }
  });

  it('drops null optional fields instead of rejecting them', () => {
    const r = validateService(
      service({ externalIPs: null, sessionAffinity: null }, { status: null }),
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect('externalIPs' in r.value.spec).toBe(false);
    expect('status' in r.value).toBe(false);
  });

  it('names the field path and the bad value', () => {
    const r = validateService(
      service({
        ports: [
          { name: 'a', port: 80 },
          { name: 'b', port: 70000 },
        ],
      }),
    );
    expect(reasonOf(r)).toBe(
      'spec.ports[1].port: must be an integer between 1 and 65535, got 70000',
    );
    if (r.ok) return;
    expect(r.error.key).toBe('ns/web');
    expect(r.error.kind).toBe('Service');
    expect(r.error.message).toBe(
      'ignoring Service ns/web: spec.ports[1].port: must be an integer between 1 and 65535, got 70000',
    );
  });

  it.each([
    ['metadata missing', { spec: {} }, 'metadata: must be an object, got nothing'],
    ['metadata an array', { metadata: [], spec: {} }, 'metadata: must be an object, got an array'],
    ['name missing', { metadata: {}, spec: {} }, 'metadata.name: must be a non-empty string'],
    [
      'name empty',
      { metadata: { name: '' }, spec: {} },
      'metadata.name: must be a non-empty string',
    ],
    ['name a number', { metadata: { name: 7 }, spec: {} }, 'got 7'],
    [
      'name upper case',
      { metadata: { name: 'Web' }, spec: {} },
      'metadata.name: must be a DNS-1123',
    ],
    [
      'name with a slash',
      { metadata: { name: 'a/b' }, spec: {} },
      'metadata.name: must be a DNS-1123',
    ],
    ['name too long', { metadata: { name: 'a'.repeat(254) }, spec: {} }, 'metadata.name'],
    [
      'namespace a number',
      { metadata: { name: 'a', namespace: 3 }, spec: {} },
      'metadata.namespace',
    ],
    [
      'namespace with a dot',
      { metadata: { name: 'a', namespace: 'a.b' }, spec: {} },
      'metadata.namespace',
    ],
    [
      'labels not strings',
      { metadata: { name: 'a', labels: { x: 1 } }, spec: {} },
      'metadata.labels["x"]: must be a string, got 1',
    ],
    [
      'annotations an array',
      { metadata: { name: 'a', annotations: [] }, spec: {} },
      'metadata.annotations: must be an object',
    ],
    [
      'uid a number',
      { metadata: { name: 'a', uid: 1 }, spec: {} },
      'metadata.uid: must be a string',
    ],
    ['spec missing', { metadata: { name: 'a' } }, 'spec: must be an object, got nothing'],
    ['spec a string', { metadata: { name: 'a' }, spec: 'x' }, 'spec: must be an object, got "x"'],
  ])('rejects metadata/spec problems: %s', (_title, obj, expected) => {
    expect(reasonOf(validateService(obj))).toContain(expected);
  });

  it.each([
    [
      'type unknown',
      { type: 'Headless' },
      'spec.type: must be one of ClusterIP, NodePort, LoadBalancer, ExternalName, got "Headless"',
    ],
    [
      'clusterIP garbage',
      { clusterIP: '10.0.0.300' },
      'spec.clusterIP: must be an IP address or "" or "None", got "10.0.0.300"',
    ],
    ['clusterIP a number', { clusterIP: 10 }, 'spec.clusterIP: must be an IP address'],
    ['clusterIP with a zone', { clusterIP: 'fe80::1%eth0' }, 'spec.clusterIP'],
    ['clusterIPs not an array', { clusterIPs: '10.0.0.1' }, 'spec.clusterIPs: must be an array'],
    ['clusterIPs entry bad', { clusterIPs: ['10.0.0.1', 'x'] }, 'spec.clusterIPs[1]'],
    ['ports an object', { ports: { port: 80 } }, 'spec.ports: must be an array, got an object'],
    ['port entry null', { ports: [null] }, 'spec.ports[0]: must be an object, got null'],
    [
      'port missing',
      { ports: [{}] },
      'spec.ports[0].port: must be an integer between 1 and 65535, got nothing',
    ],
    ['port zero', { ports: [{ port: 0 }] }, 'got 0'],
    ['port fractional', { ports: [{ port: 80.5 }] }, 'got 80.5'],
    ['port a string', { ports: [{ port: '80' }] }, 'got "80"'],
    ['port NaN', { ports: [{ port: Number.NaN }] }, 'got NaN'],
    [
      'protocol lower case',
      { ports: [{ port: 80, protocol: 'tcp' }] },
      'spec.ports[0].protocol: must be one of TCP, UDP, SCTP, got "tcp"',
    ],
    [
      'nodePort too big',
      { ports: [{ port: 80, nodePort: 65536 }] },
      'spec.ports[0].nodePort: must be an integer between 0 and 65535',
    ],
    ['nodePort negative', { ports: [{ port: 80, nodePort: -1 }] }, 'spec.ports[0].nodePort'],
    [
      'unnamed port among several',
      { ports: [{ port: 80, name: 'a' }, { port: 81 }] },
      'spec.ports[1].name: must be non-empty when there is more than one port',
    ],
    [
      'duplicate port names',
      {
        ports: [
          { port: 80, name: 'a' },
          { port: 81, name: 'a' },
        ],
      },
      'spec.ports[1].name: duplicate port name "a"',
    ],
    [
      'port name a number',
      { ports: [{ port: 80, name: 1 }] },
      'spec.ports[0].name: must be a string, got 1',
    ],
    [
      'port name upper case',
      { ports: [{ port: 80, name: 'HTTP' }] },
      'spec.ports[0].name: must be a DNS-1123 label',
    ],
    [
      'externalIPs bad',
      { externalIPs: ['1.2.3.4', 'example.com'] },
      'spec.externalIPs[1]: must be an IP address, got "example.com"',
    ],
    ['externalIPs a string', { externalIPs: '1.2.3.4' }, 'spec.externalIPs: must be an array'],
    [
      'sessionAffinity unknown',
      { sessionAffinity: 'Cookie' },
      'spec.sessionAffinity: must be one of None, ClientIP, got "Cookie"',
    ],
    [
      'affinity config a string',
      { sessionAffinityConfig: 'x' },
      'spec.sessionAffinityConfig: must be an object',
    ],
    [
      'clientIP a number',
      { sessionAffinityConfig: { clientIP: 1 } },
      'spec.sessionAffinityConfig.clientIP: must be an object',
    ],
    [
      'timeout zero',
      { sessionAffinityConfig: { clientIP: { timeoutSeconds: 0 } } },
      'spec.sessionAffinityConfig.clientIP.timeoutSeconds: must be an integer between 1 and 86400, got 0',
    ],
    [
      'timeout too long',
      { sessionAffinityConfig: { clientIP: { timeoutSeconds: 86401 } } },
      'got 86401',
    ],
    [
      'source ranges not strings',
      { loadBalancerSourceRanges: [1] },
      'spec.loadBalancerSourceRanges[0]: must be an IP CIDR, got 1',
    ],
  ])('rejects spec problems: %s', (_title, spec, expected) => {
    expect(reasonOf(validateService(service(spec)))).toContain(expected);
  });

  it.each([
    ['status a string', 'x', 'status: must be an object'],
    ['loadBalancer an array', { loadBalancer: [] }, 'status.loadBalancer: must be an object'],
    [
      'ingress an object',
      { loadBalancer: { ingress: {} } },
      'status.loadBalancer.ingress: must be an array',
    ],
    [
      'ingress ip bad',
      { loadBalancer: { ingress: [{ ip: '1.2.3.4' }, { ip: 'nope' }] } },
      'status.loadBalancer.ingress[1].ip: must be an IP address, got "nope"',
    ],
    [
      'ingress hostname a number',
      { loadBalancer: { ingress: [{ hostname: 5 }] } },
      'status.loadBalancer.ingress[0].hostname: must be a string',
    ],
  ])('rejects status problems: %s', (_title, status, expected) => {
    expect(reasonOf(validateService(service({}, { status })))).toContain(expected);
  });

  it('accepts the values at the edges of every range', () => {
    const r = validateService(
      service(
        {
          clusterIP: 'None',
          clusterIPs: ['None'],
          ports: [
            { name: 'a', port: 1, nodePort: 0, protocol: 'UDP' },
            { name: 'b', port: 65535, nodePort: 65535, protocol: 'SCTP' },
          ],
          externalIPs: ['fd00::1', '192.0.2.1'],
          sessionAffinity: 'ClientIP',
          sessionAffinityConfig: { clientIP: { timeoutSeconds: 86400 } },
        },
        {
          status: { loadBalancer: { ingress: [{ ip: '192.0.2.2' }, { hostname: 'lb.example' }] } },
        },
      ),
    );
    expect(r.ok).toBe(true);
    expect(validateService(service({ clusterIP: '' })).ok).toBe(true);
    expect(validateService(service({ ports: [{ port: 80, name: '' }] })).ok).toBe(true);
    expect(validateService(service({ ports: [] })).ok).toBe(true);
    expect(validateService({ metadata: { name: 'x' }, spec: {} }).ok).toBe(true);
  });

  it.each([
    ['an unspecified clusterIP', { clusterIP: '0.0.0.0' }, 'spec.clusterIP'],
    ['an unspecified IPv6 clusterIP', { clusterIP: '::' }, 'spec.clusterIP'],
    ['an unspecified clusterIPs entry', { clusterIPs: ['0:0::0'] }, 'spec.clusterIPs[0]'],
    ['a multicast external IP', { externalIPs: ['10.0.0.9', '224.0.0.1'] }, 'spec.externalIPs[1]'],
    ['a multicast IPv6 external IP', { externalIPs: ['ff02::1'] }, 'spec.externalIPs[0]'],
  ])(
    'refuses %s: a listener there would take every address, or no unicast client',
    (_t, spec, path) => {
      expect(reasonOf(validateService(service(spec)))).toContain(
        `${path}: must be a unicast address`,
      );
    },
  );

  it('refuses an unspecified load-balancer ingress IP but keeps loopback Service IPs', () => {
    const status = { loadBalancer: { ingress: [{ ip: '0.0.0.0' }] } };
    expect(reasonOf(validateService(service({}, { status })))).toContain(
      'status.loadBalancer.ingress[0].ip: must be a unicast address',
    );
    // 127.0.0.0/8 Service IPs are how portal mode runs without root; they stay valid.
    expect(validateService(service({ clusterIP: '127.1.2.3', externalIPs: ['::1'] })).ok).toBe(
      true,
    );
  });

  it('reports several problems, bounded, in one message', () => {
    const ports = Array.from({ length: 8 }, (_, i) => ({ name: `p${i}`, port: -i }));
    const reason = reasonOf(validateService(service({ ports })));
    expect(reason.split('; ')).toHaveLength(6);
    expect(reason).toContain('spec.ports[0].port');
    expect(reason).toContain('spec.ports[4].port');
    expect(reason).not.toContain('spec.ports[5].port');
    expect(reason).toMatch(/and 3 more problem\(s\)$/);
  });

  it('quotes long and hostile strings safely', () => {
    const evil = `a\n${'x'.repeat(200)}`;
    const r = validateService(service({ clusterIP: evil }));
    const reason = reasonOf(r);
    expect(reason).not.toContain('\n');
    expect(reason.length).toBeLessThan(200);
    const named = validateService({ metadata: { name: 'Bad\nName' }, spec: {} });
    expect(named.ok).toBe(false);
    if (!named.ok) expect(named.error.key).toBe('default/"Bad\\nName"');
  });

  it.each([
    ['undefined', undefined],
    ['null', null],
    ['a number', 42],
    ['a string', 'svc'],
    ['an array', [service()]],
    ['a function', () => service()],
    ['a symbol', Symbol('x')],
    ['a bigint', 10n],
  ])('rejects %s without throwing', (_title, value) => {
    const r = validateService(value);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.key).toBe('<unknown>');
  });

  it('survives getters and proxies that throw', () => {
    const getter = { spec: {} };
    Object.defineProperty(getter, 'metadata', {
      enumerable: true,
      get() {
        throw new TypeError('boom');
      },
    });
    expect(reasonOf(validateService(getter))).toContain('could not be read (TypeError)');

    const hostile = new Proxy(
      {},
      {
        ownKeys() {
          throw new Error('no');
        },
      },
    );
    expect(validateService(hostile).ok).toBe(false);
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    expect(validateService(proxy).ok).toBe(false);
    expect(validateService(service({ ports: [proxy] })).ok).toBe(false);
    const throwingToString = {
      toString: () => {
        throw new Error('x');
      },
    };
    expect(reasonOf(validateService(service({ clusterIP: throwingToString })))).toContain(
      'got an object',
    );
  });

  it('reads a getter once, so validation and the copy agree', () => {
    let reads = 0;
    const spec = {};
    Object.defineProperty(spec, 'clusterIP', {
      enumerable: true,
      get() {
        reads++;
        return reads === 1 ? '10.0.0.1' : 'garbage';
      },
    });
    const r = validateService({ metadata: { name: 'a' }, spec });
    expect(r.ok && r.value.spec.clusterIP).toBe('10.0.0.1');
    expect(reads).toBe(1);
  });

  it('copes with cyclic objects', () => {
    const metadata: Record<string, unknown> = { name: 'a' };
    metadata.self = metadata;
    const obj: Record<string, unknown> = { metadata, spec: {} };
    obj.loop = obj;
    expect(validateService(obj).ok).toBe(true);
    const badCycle: Record<string, unknown> = { metadata: { name: 'a' } };
    badCycle.spec = { ports: [badCycle] };
    expect(reasonOf(validateService(badCycle))).toContain('spec.ports[0].port');
  });
});

describe('validateEndpoints', () => {
  const endpoints = (subsets: unknown) => ({ metadata: { name: 'web' }, subsets });

  it('accepts Endpoints with and without subsets and defaults the namespace', () => {
    const ok = validateEndpoints(
      endpoints([
        { addresses: [{ ip: '10.1.0.1' }], notReadyAddresses: [], ports: [{ port: 80 }] },
      ]),
    );
    expect(ok.ok && ok.value.metadata.namespace).toBe('default');
    expect(validateEndpoints({ metadata: { name: 'web' } }).ok).toBe(true);
    expect(validateEndpoints(endpoints(null)).ok).toBe(true);
  });

  it('refuses bad leaves with their field paths, as the API server does', () => {
    const r = validateEndpoints(
      endpoints([{ addresses: [{ ip: '' }, { ip: 5 }], ports: [{ port: -1 }] }]),
    );
    expect(reasonOf(r)).toBe(
      'subsets[0].addresses[0].ip: must be an IP address, got ""; subsets[0].addresses[1].ip: must be an IP address, got 5; subsets[0].ports[0].port: must be an integer between 1 and 65535, got -1',
    );
  });

  it('copies subsets, never sharing arrays with the input', () => {
    const subsets = [{ addresses: [{ ip: '10.1.0.1' }], ports: [{ port: 80 }] }];
    const input = { metadata: { name: 'web' }, subsets };
    const r = validateEndpoints(input);
    if (!r.ok) throw r.error;
    expect(r.value.subsets).toEqual(input.subsets);
    expect(r.value.subsets).not.toBe(input.subsets);
    expect(r.value.subsets?.[0]?.addresses).not.toBe(input.subsets[0]?.addresses);
  });

  it.each([
    ['metadata missing', { subsets: [] }, 'metadata: must be an object'],
    ['subsets an object', endpoints({}), 'subsets: must be an array, got an object'],
    ['subset null', endpoints([null]), 'subsets[0]: must be an object, got null'],
    [
      'addresses a string',
      endpoints([{ addresses: '10.0.0.1' }]),
      'subsets[0].addresses: must be an array',
    ],
    [
      'address a string',
      endpoints([{ addresses: ['10.0.0.1'] }]),
      'subsets[0].addresses[0]: must be an object',
    ],
    [
      'notReadyAddresses a number',
      endpoints([{ notReadyAddresses: 1 }]),
      'subsets[0].notReadyAddresses: must be an array',
    ],
    ['ports an object', endpoints([{ ports: { port: 80 } }]), 'subsets[0].ports: must be an array'],
    ['port null', endpoints([{ ports: [null] }]), 'subsets[0].ports[0]: must be an object'],
  ])('rejects %s', (_title, obj, expected) => {
    const r = validateEndpoints(obj);
    expect(reasonOf(r)).toContain(expected);
    if (!r.ok) expect(r.error.kind).toBe('Endpoints');
  });

  it('never throws on garbage', () => {
    for (const value of [undefined, null, 1, 'x', [], () => 1]) {
      expect(validateEndpoints(value).ok).toBe(false);
    }
  });
});

describe('validateEndpointSlice', () => {
  const slice = (extra: Record<string, unknown> = {}) => ({
    metadata: {
      name: 'web-abc12',
      namespace: 'ns',
      labels: { 'kubernetes.io/service-name': 'web' },
    },
    addressType: 'IPv4',
    endpoints: [{ addresses: ['10.1.0.1'], conditions: { ready: true } }],
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    ...extra,
  });

  it('accepts a well-formed slice and copies its arrays', () => {
    const input = slice();
    const r = validateEndpointSlice(input);
    if (!r.ok) throw r.error;
    expect(r.value).toEqual(input);
    expect(r.value.endpoints).not.toBe(input.endpoints);
    expect(r.value.endpoints[0]?.addresses).not.toBe(input.endpoints[0]?.addresses);
  });

  it('treats absent endpoints as none and allows absent ports', () => {
    const r = validateEndpointSlice(slice({ endpoints: undefined, ports: undefined }));
    if (!r.ok) throw r.error;
    expect(r.value.endpoints).toEqual([]);
  });

  it.each([
    [
      'no service-name label',
      { metadata: { name: 'a' } },
      'metadata.labels["kubernetes.io/service-name"]: must name the Service, got nothing',
    ],
    [
      'empty service-name label',
      { metadata: { name: 'a', labels: { 'kubernetes.io/service-name': '' } } },
      'must name the Service, got ""',
    ],
    [
      'addressType missing',
      { addressType: undefined },
      'addressType: must be one of IPv4, IPv6, FQDN, got nothing',
    ],
    [
      'addressType unknown',
      { addressType: 'IPv5' },
      'addressType: must be one of IPv4, IPv6, FQDN, got "IPv5"',
    ],
    ['endpoints an object', { endpoints: {} }, 'endpoints: must be an array'],
    ['endpoint null', { endpoints: [null] }, 'endpoints[0]: must be an object'],
    [
      'addresses missing',
      { endpoints: [{}] },
      'endpoints[0].addresses: must be an array, got nothing',
    ],
    [
      'addresses a string',
      { endpoints: [{ addresses: '10.0.0.1' }] },
      'endpoints[0].addresses: must be an array',
    ],
    [
      'conditions a boolean',
      { endpoints: [{ addresses: [], conditions: true }] },
      'endpoints[0].conditions: must be an object',
    ],
    ['ports an object', { ports: {} }, 'ports: must be an array'],
    ['port a number', { ports: [80] }, 'ports[0]: must be an object, got 80'],
  ])('rejects %s', (_title, extra, expected) => {
    const r = validateEndpointSlice(slice(extra));
    expect(reasonOf(r)).toContain(expected);
    if (!r.ok) expect(r.error.kind).toBe('EndpointSlice');
  });

  it('never throws on garbage', () => {
    for (const value of [undefined, null, 1, 'x', [], { metadata: null }]) {
      expect(validateEndpointSlice(value).ok).toBe(false);
    }
  });
});

describe('ValidateOptions.reuse', () => {
  it('gives back a validator output of the same kind as it is, and copies anything else', () => {
    const first = validateService({ metadata: { name: 'a' }, spec: {} });
    if (!first.ok) throw first.error;
    const again = validateService(first.value, { reuse: true });
    expect(again.ok && again.value).toBe(first.value);
    // Without the option, or for an object that did not come out of a validator, a fresh copy.
    const copied = validateService(first.value);
    expect(copied.ok && copied.value).not.toBe(first.value);
    const raw = { metadata: { name: 'a' }, spec: {} };
    const checked = validateService(raw, { reuse: true });
    expect(checked.ok && checked.value).not.toBe(raw);
  });

  it('trusts an output only for its own kind', () => {
    const endpoints = validateEndpoints({ metadata: { name: 'a' } });
    if (!endpoints.ok) throw endpoints.error;
    expect(validateService(endpoints.value, { reuse: true }).ok).toBe(false);
    const slice = validateEndpointSlice(endpoints.value, { reuse: true });
    expect(slice.ok).toBe(false);
    expect(validateEndpoints(endpoints.value, { reuse: true })).toEqual({
      ok: true,
      value: endpoints.value,
    });
  });
});
