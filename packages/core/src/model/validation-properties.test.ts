import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { RoundRobinLoadBalancer } from '../load-balancing/load-balancer-round-robin.js';
import { useProxierHarness } from '../test-support/proxier-harness.js';
import { validateEndpointSlice, validateEndpoints, validateService } from './validation.js';

/**
 * Property tests (issue 12 defect 4): generated Services, Endpoints and EndpointSlices, a mix of
 * valid and hostile leaves, are either rejected with a reason that starts at a field path, or
 * accepted and then served as they say by a Proxier with fake sockets. Bounded to a few seconds;
 * fast-check prints the seed and the shrunk counterexample on failure.
 */

const start = useProxierHarness();

/** A field path as validation writes it: `a.b[0].c` or `metadata.labels["x"]`. */
const FIELD_PATH = /^[A-Za-z]+(?:\.[A-Za-z]+|\[\d+\]|\["[^"]*"\])*: /;

const ipv4 = fc.ipV4();
const ipv6 = fc.ipV6();
const hostileString = fc.oneof(
  fc.constantFrom('', 'localhost', '999.1.1.1', '0.0.0.0', '::', '255.255.255.255', '224.0.0.1'),
  fc.constantFrom('8_000', '0x50', '1e3', ' 80', 'x'.repeat(5000), 'a\u0000b', 'fe80::1%eth0'),
  fc.string({ maxLength: 20 }),
);
const portNumber = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 1, max: 65_535 }) },
  { weight: 2, arbitrary: fc.constantFrom(53, 80) },
  { weight: 1, arbitrary: fc.constantFrom(-1, 0, 65_536, 1e26, Number.NaN, 8.5) },
  { weight: 1, arbitrary: fc.constantFrom(null, '8_000', '80', true) },
);
const portName = fc.oneof(
  fc.constantFrom('', 'http', 'dns', 'a-b'),
  fc.constantFrom('HTTP', 'a_b', '-a', 'x'.repeat(64)),
);
const protocol = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('TCP', 'UDP', 'SCTP') },
  { weight: 1, arbitrary: fc.constantFrom(undefined, 'tcp', 'HTTP', 7) },
);

function rejectedWithPath(result: { ok: boolean; error?: { reason: string } }): boolean {
  if (result.ok) return false;
  expect(result.error?.reason).toMatch(FIELD_PATH);
  return true;
}

const sliceArb = fc.record({
  addressType: fc.constantFrom('IPv4', 'IPv6'),
  endpoints: fc.array(
    fc.record({
      addresses: fc.array(fc.oneof(ipv4, ipv6, hostileString), { minLength: 0, maxLength: 2 }),
    }),
    { maxLength: 4 },
  ),
  ports: fc.array(fc.record({ name: portName, port: portNumber, protocol }), {
    minLength: 1,
    maxLength: 3,
  }),
});

const endpointsArb = fc.array(
  fc.record({
    addresses: fc.array(fc.record({ ip: fc.oneof(ipv4, ipv6, hostileString) }), { maxLength: 3 }),
    ports: fc.array(fc.record({ name: portName, port: portNumber, protocol }), {
      minLength: 1,
      maxLength: 2,
    }),
  }),
  { minLength: 1, maxLength: 2 },
);

const serviceArb = fc.record({
  clusterIP: fc.oneof(
    { weight: 4, arbitrary: fc.integer({ min: 1, max: 250 }).map((n) => `10.96.0.${n}`) },
    { weight: 1, arbitrary: hostileString },
  ),
  ports: fc.array(
    fc.record({
      name: portName,
      port: portNumber,
      protocol,
      targetPort: fc.oneof(portNumber, portName),
    }),
    { minLength: 1, maxLength: 3 },
  ),
});

describe('validation properties', () => {
  it('an EndpointSlice is rejected with a field path, or served exactly as it says', async () => {
    const h = await start();
    const lb = h.lb as RoundRobinLoadBalancer;
    let n = 0;
    fc.assert(
      fc.property(sliceArb, (body) => {
        const name = `s${n++}`;
        const obj = {
          metadata: { namespace: 'ns', name, labels: { 'kubernetes.io/service-name': name } },
          ...body,
        };
        const result = validateEndpointSlice(obj);
        if (rejectedWithPath(result)) return;
        h.proxier.onEndpointSliceAdd(obj as never);
        for (const port of body.ports) {
          const want = body.endpoints
            .flatMap((e) => e.addresses.slice(0, 1))
            .map((a) => (a.includes(':') ? `[${a}]:${port.port}` : `${a}:${port.port}`));
          const got = lb.endpoints({ namespace: 'ns', name, port: port.name });
          expect([...got].sort()).toEqual([...new Set(want)].sort());
        }
      }),
      { numRuns: 300 },
    );
  });

  it('an Endpoints object is rejected with a field path, or served exactly as it says', async () => {
    const h = await start();
    const lb = h.lb as RoundRobinLoadBalancer;
    let n = 0;
    fc.assert(
      fc.property(endpointsArb, (subsets) => {
        const name = `e${n++}`;
        const obj = { metadata: { namespace: 'ns', name }, subsets };
        if (rejectedWithPath(validateEndpoints(obj))) return;
        h.proxier.onEndpointsAdd(obj as never);
        const want = new Map<string, Set<string>>();
        for (const subset of subsets) {
          for (const port of subset.ports) {
            const set = want.get(port.name) ?? new Set();
            for (const { ip } of subset.addresses)
              set.add(ip.includes(':') ? `[${ip}]:${port.port}` : `${ip}:${port.port}`);
            want.set(port.name, set);
          }
        }
        for (const [port, set] of want) {
          const got = lb.endpoints({ namespace: 'ns', name, port });
          expect([...got].sort()).toEqual([...set].sort());
        }
      }),
      { numRuns: 300 },
    );
  });

  it('a Service is rejected with a field path, or gets a listener per port on its cluster IP', async () => {
    const h = await start();
    let n = 0;
    await fc.assert(
      fc.asyncProperty(serviceArb, async (spec) => {
        const name = `v${n++}`;
        const obj = { metadata: { namespace: 'ns', name }, spec };
        if (rejectedWithPath(validateService(obj))) return;
        await h.synced(() => h.proxier.onServiceAdd(obj as never));
        const open = h.sockets
          .openOn(spec.clusterIP)
          .map((s) => `${s.protocol} ${s.requested}`)
          .sort();
        // "" and "None" mean no cluster IP: nothing listens.
        const headless = spec.clusterIP === '' || spec.clusterIP === 'None';
        const want = headless
          ? []
          : spec.ports.map((p) => `${p.protocol ?? 'TCP'} ${p.port}`).sort();
        expect(open).toEqual(want);
        await h.synced(() => h.proxier.onServiceDelete(obj as never));
      }),
      { numRuns: 60 },
    );
  });
});
