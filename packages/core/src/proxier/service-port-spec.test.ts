import { describe, expect, it } from 'vitest';
import type { Service } from '../model/model.js';
import {
  compareSpecs,
  type ServicePortSpec,
  servicePortSpecs,
  shouldSkipService,
  specAddresses,
} from './service-port-spec.js';

function svc(spec: Partial<Service['spec']> = {}, extra: Partial<Service> = {}): Service {
  return {
    metadata: { namespace: 'ns', name: 's', uid: 'u1' },
    spec: { clusterIP: '10.0.0.1', ports: [{ name: 'p', port: 80 }], ...spec },
    ...extra,
  };
}

function one(service: Service): ServicePortSpec {
  const [spec] = servicePortSpecs(service);
  if (spec === undefined) throw new Error('no spec');
  return spec;
}

describe('servicePortSpecs', () => {
  it('reads every field a proxy needs, with defaults', () => {
    const spec = one(
      svc(
        {
          externalIPs: ['192.0.2.1'],
          sessionAffinity: 'ClientIP',
          ports: [{ name: 'p', port: 80, nodePort: 30080 }],
        },
        {
          status: {
            loadBalancer: { ingress: [{ ip: '198.51.100.1' }, { hostname: 'x.example' }] },
          },
        },
      ),
    );
    expect(spec).toEqual({
      name: { namespace: 'ns', name: 's', port: 'p', protocol: 'TCP' },
      key: 'ns/s:p',
      serviceRef: { kind: 'Service', apiVersion: 'v1', namespace: 'ns', name: 's', uid: 'u1' },
      service: expect.objectContaining({ metadata: expect.objectContaining({ name: 's' }) }),
      protocol: 'TCP',
      port: 80,
      nodePort: 30080,
      clusterIP: '10.0.0.1',
      externalIPs: ['192.0.2.1'],
      loadBalancerIPs: ['198.51.100.1'],
      loadBalancerSourceRanges: [],
      affinity: 'ClientIP',
      stickyMaxAgeSeconds: 10_800,
      proxyProtocol: '',
    });
    expect(specAddresses(spec)).toEqual(['10.0.0.1', '192.0.2.1', '198.51.100.1']);
  });

  it('gives one spec per port, keyed by port name', () => {
    const specs = servicePortSpecs(
      svc({
        ports: [
          { name: 'a', port: 80, protocol: 'TCP' },
          { name: 'b', port: 53, protocol: 'UDP' },
        ],
      }),
    );
    expect(specs.map((s) => [s.key, s.protocol])).toEqual([
      ['ns/s:a', 'TCP'],
      ['ns/s:b', 'UDP'],
    ]);
  });

  it('skips headless and ExternalName Services', () => {
    for (const s of [
      svc({ clusterIP: 'None' }),
      svc({ clusterIP: '' }),
      svc({ type: 'ExternalName', clusterIP: '10.0.0.1' }),
    ]) {
      expect(shouldSkipService(s)).toBe(true);
      expect(servicePortSpecs(s)).toEqual([]);
    }
  });

  it('falls back to clusterIPs[0] and leaves the uid out when there is none', () => {
    const s = svc();
    delete s.spec.clusterIP;
    s.spec.clusterIPs = ['10.0.0.7'];
    delete s.metadata.uid;
    const spec = one(s);
    expect(spec.clusterIP).toBe('10.0.0.7');
    expect(spec.serviceRef).not.toHaveProperty('uid');
  });
});

describe('compareSpecs', () => {
  const base = one(svc());
  it.each<[string, Partial<Service['spec']>]>([
    ['protocol', { ports: [{ name: 'p', port: 80, protocol: 'UDP' }] }],
    ['port', { ports: [{ name: 'p', port: 81 }] }],
    ['nodePort', { ports: [{ name: 'p', port: 80, nodePort: 30000 }] }],
    ['clusterIP', { clusterIP: '10.0.0.2' }],
    ['externalIPs', { externalIPs: ['192.0.2.1'] }],
    ['affinity type', { sessionAffinity: 'ClientIP' }],
  ])('re-creates on a %s change', (_what, change) => {
    expect(compareSpecs(base, one(svc(change)))).toBe('recreate');
  });

  it('re-creates on a load-balancer IP change', () => {
    const lb = one(svc({}, { status: { loadBalancer: { ingress: [{ ip: '198.51.100.1' }] } } }));
    expect(compareSpecs(base, lb)).toBe('recreate');
  });

  it('re-creates when the PROXY protocol annotation changes', () => {
    const pp = (version: string) => {
      const s = svc();
      s.metadata.annotations = { 'userspace-proxy.io/proxy-protocol': version };
      return one(s);
    };
    expect(pp('v2').proxyProtocol).toBe('v2');
    expect(compareSpecs(base, pp('v1'))).toBe('recreate');
    expect(compareSpecs(pp('v1'), pp('v2'))).toBe('recreate');
    expect(compareSpecs(pp('v2'), pp('v2'))).toBe('same');
  });

  it('updates in place for a TTL or uid change, and sees "None" as unset', () => {
    const sticky = (timeoutSeconds: number) =>
      one(
        svc({
          sessionAffinity: 'ClientIP',
          sessionAffinityConfig: { clientIP: { timeoutSeconds } },
        }),
      );
    expect(compareSpecs(sticky(60), sticky(120))).toBe('in-place');
    const other = svc();
    other.metadata.uid = 'u2';
    expect(compareSpecs(base, one(other))).toBe('in-place');
    expect(compareSpecs(base, one(svc({ sessionAffinity: 'None' })))).toBe('same');
    expect(compareSpecs(base, one(svc()))).toBe('same');
  });
});
