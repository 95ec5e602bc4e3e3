import { describe, expect, it } from 'vitest';
import { validateEndpointSlice, validateEndpoints, validateService } from './validation.js';

/** Issue 12 defect 4: leaves the API server checks, each rejected with its field path. */

const slice = (extra: Record<string, unknown> = {}) => ({
  metadata: { name: 'web-abc12', namespace: 'ns', labels: { 'kubernetes.io/service-name': 'web' } },
  addressType: 'IPv4',
  endpoints: [{ addresses: ['10.1.0.1'], conditions: { ready: true } }],
  ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
  ...extra,
});
const endpoints = (subsets: unknown) => ({ metadata: { name: 'web' }, subsets });
const service = (spec: Record<string, unknown> = {}) => ({
  metadata: { name: 'web', namespace: 'ns' },
  spec: { clusterIP: '10.0.0.1', ports: [{ name: 'http', port: 80 }], ...spec },
});

function reason(r: { ok: boolean; error?: { reason: string } }): string {
  if (r.ok) throw new Error('expected a rejection');
  return r.error?.reason ?? '';
}

const MEGABYTE = 'x'.repeat(1 << 20);

describe('validateEndpointSlice leaves', () => {
  it.each([
    ['port -1', { ports: [{ port: -1 }] }, 'ports[0].port: must be an integer between 1 and 65535'],
    ['port 0', { ports: [{ port: 0 }] }, 'ports[0].port'],
    ['port 65536', { ports: [{ port: 65536 }] }, 'ports[0].port'],
    ['port 1e26', { ports: [{ port: 1e26 }] }, 'ports[0].port'],
    ['port null', { ports: [{ name: 'a', port: null }] }, 'ports[0].port'],
    ['port "8_000"', { ports: [{ port: '8_000' }] }, 'ports[0].port'],
    ['protocol', { ports: [{ port: 80, protocol: 'tcp' }] }, 'ports[0].protocol'],
    ['port name', { ports: [{ name: 'A B', port: 80 }] }, 'ports[0].name'],
    [
      'duplicate port name',
      {
        ports: [
          { name: 'a', port: 80 },
          { name: 'a', port: 81 },
        ],
      },
      'ports[1].name',
    ],
    ['address ""', { endpoints: [{ addresses: [''] }] }, 'endpoints[0].addresses[0]'],
    [
      'address localhost',
      { endpoints: [{ addresses: ['localhost'] }] },
      'endpoints[0].addresses[0]',
    ],
    [
      'address 999.1.1.1',
      { endpoints: [{ addresses: ['999.1.1.1'] }] },
      'endpoints[0].addresses[0]',
    ],
    ['IPv6 in IPv4', { endpoints: [{ addresses: ['fd00::1'] }] }, 'endpoints[0].addresses[0]'],
    [
      'IPv4 in IPv6',
      { addressType: 'IPv6', endpoints: [{ addresses: ['10.0.0.1'] }] },
      'endpoints[0].addresses[0]',
    ],
    ['unspecified', { endpoints: [{ addresses: ['0.0.0.0'] }] }, 'endpoints[0].addresses[0]'],
    ['a megabyte', { endpoints: [{ addresses: [MEGABYTE] }] }, 'endpoints[0].addresses[0]'],
    [
      'FQDN megabyte',
      { addressType: 'FQDN', endpoints: [{ addresses: [MEGABYTE] }] },
      'endpoints[0].addresses[0]',
    ],
    ['no address', { endpoints: [{ addresses: [] }] }, 'endpoints[0].addresses'],
    [
      'ready a string',
      { endpoints: [{ addresses: ['10.0.0.1'], conditions: { ready: 'yes' } }] },
      'endpoints[0].conditions.ready',
    ],
    [
      'nodeName',
      { endpoints: [{ addresses: ['10.0.0.1'], nodeName: MEGABYTE }] },
      'endpoints[0].nodeName',
    ],
    [
      'label value',
      { metadata: { name: 'a', labels: { 'kubernetes.io/service-name': 'web', x: MEGABYTE } } },
      'metadata.labels["x"]',
    ],
  ])('rejects %s', (_t, extra, expected) => {
    const text = reason(validateEndpointSlice(slice(extra)));
    expect(text).toContain(expected);
    expect(text.length).toBeLessThan(1000);
  });

  it('accepts FQDN names, loopback endpoints and IPv6 in an IPv6 slice', () => {
    expect(validateEndpointSlice(slice({ endpoints: [{ addresses: ['127.0.0.5'] }] })).ok).toBe(
      true,
    );
    expect(
      validateEndpointSlice(slice({ addressType: 'IPv6', endpoints: [{ addresses: ['fd00::1'] }] }))
        .ok,
    ).toBe(true);
    expect(
      validateEndpointSlice(
        slice({ addressType: 'FQDN', endpoints: [{ addresses: ['db.example.com'] }] }),
      ).ok,
    ).toBe(true);
  });
});

describe('validateEndpoints leaves', () => {
  it.each([
    ['ip ""', [{ addresses: [{ ip: '' }] }], 'subsets[0].addresses[0].ip'],
    ['ip a number', [{ addresses: [{ ip: 5 }] }], 'subsets[0].addresses[0].ip'],
    [
      'ip localhost',
      [{ notReadyAddresses: [{ ip: 'localhost' }] }],
      'subsets[0].notReadyAddresses[0].ip',
    ],
    ['port -1', [{ ports: [{ port: -1 }] }], 'subsets[0].ports[0].port'],
    ['port "80"', [{ ports: [{ port: '80' }] }], 'subsets[0].ports[0].port'],
    [
      'unnamed of two',
      [{ ports: [{ port: 80 }, { name: 'b', port: 81 }] }],
      'subsets[0].ports[0].name',
    ],
    ['protocol', [{ ports: [{ port: 80, protocol: 'HTTP' }] }], 'subsets[0].ports[0].protocol'],
  ])('rejects %s', (_t, subsets, expected) => {
    expect(reason(validateEndpoints(endpoints(subsets)))).toContain(expected);
  });
});

describe('validateService leaves', () => {
  it.each([
    ['targetPort 0', { ports: [{ port: 80, targetPort: 0 }] }, 'spec.ports[0].targetPort'],
    ['targetPort 70000', { ports: [{ port: 80, targetPort: 70000 }] }, 'spec.ports[0].targetPort'],
    [
      'targetPort "8_000"',
      { ports: [{ port: 80, targetPort: '8_000' }] },
      'spec.ports[0].targetPort',
    ],
    [
      'targetPort a megabyte',
      { ports: [{ port: 80, targetPort: MEGABYTE }] },
      'spec.ports[0].targetPort',
    ],
    [
      'a port twice',
      {
        ports: [
          { name: 'a', port: 80 },
          { name: 'b', port: 80, protocol: 'TCP' },
        ],
      },
      'spec.ports[1]: duplicate port 80/TCP',
    ],
    [
      'a node port twice',
      {
        ports: [
          { name: 'a', port: 80, nodePort: 30000 },
          { name: 'b', port: 81, nodePort: 30000 },
        ],
      },
      'spec.ports[1].nodePort: duplicate',
    ],
    ['broadcast clusterIP', { clusterIP: '255.255.255.255' }, 'spec.clusterIP'],
    ['multicast clusterIP', { clusterIP: '239.1.1.1' }, 'spec.clusterIP'],
    ['unspecified externalIP', { externalIPs: ['::'] }, 'spec.externalIPs[0]'],
    [
      'bad source range',
      { loadBalancerSourceRanges: ['10.0.0.0/33'] },
      'spec.loadBalancerSourceRanges[0]',
    ],
  ])('rejects %s', (_t, spec, expected) => {
    expect(reason(validateService(service(spec)))).toContain(expected);
  });

  it('accepts named and numeric target ports and CIDR source ranges', () => {
    const ok = validateService(
      service({
        ports: [
          { name: 'a', port: 80, targetPort: 'http-alt' },
          { name: 'b', port: 81, targetPort: 8081 },
        ],
        loadBalancerSourceRanges: ['10.0.0.0/8', ' 192.168.1.1/32 ', 'fd00::/8'],
      }),
    );
    if (!ok.ok) throw ok.error;
  });
});
