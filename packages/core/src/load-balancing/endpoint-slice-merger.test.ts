import { describe, expect, it } from 'vitest';
import type { EndpointsHandler } from '../config/handlers.js';
import type { EndpointConditions, EndpointSlice, Endpoints } from '../model/model.js';
import { spyLogger } from '../test-support/spy-logger.js';
import { EndpointSliceMerger } from './endpoint-slice-merger.js';
import { buildPortsToEndpointsMap } from './endpoints-map.js';
import { mulberry32 } from './random.js';

type Ep = { ip: string; ready?: boolean; serving?: boolean; terminating?: boolean };

function slice(
  name: string,
  service: string | undefined,
  endpoints: Ep[],
  ports: EndpointSlice['ports'] = [{ name: 'http', port: 80, protocol: 'TCP' }],
  extra: { namespace?: string; addressType?: EndpointSlice['addressType'] } = {},
): EndpointSlice {
  return {
    metadata: {
      name,
      namespace: extra.namespace ?? 'ns',
      ...(service === undefined ? {} : { labels: { 'kubernetes.io/service-name': service } }),
    },
    addressType: extra.addressType ?? 'IPv4',
    endpoints: endpoints.map(({ ip, ...conditions }) => ({
      addresses: [ip],
      ...(Object.keys(conditions).length > 0
        ? { conditions: conditions as EndpointConditions }
        : {}),
    })),
    ports,
  };
}

function recorder() {
  const calls: { op: string; old?: Endpoints; ep: Endpoints }[] = [];
  const target: EndpointsHandler = {
    onEndpointsAdd: (ep) => calls.push({ op: 'add', ep }),
    onEndpointsUpdate: (old, ep) => calls.push({ op: 'update', old, ep }),
    onEndpointsDelete: (ep) => calls.push({ op: 'delete', ep }),
    onEndpointsSynced: () => calls.push({ op: 'synced', ep: { metadata: { name: '' } } }),
  };
  return { calls, target, merger: new EndpointSliceMerger(target) };
}

/** What the load balancer would see: the synthetic object through buildPortsToEndpointsMap. */
function lists(ep: Endpoints | undefined): Record<string, string[]> {
  return ep === undefined ? {} : Object.fromEntries(buildPortsToEndpointsMap(ep));
}

function last(calls: { ep: Endpoints }[]): Endpoints | undefined {
  return calls.at(-1)?.ep;
}

describe('EndpointSliceMerger', () => {
  it('delivers a Service’s first slice as an Add named after the Service', () => {
    const { calls, merger } = recorder();
    merger.onEndpointSliceAdd(slice('web-abc', 'web', [{ ip: '10.0.0.1' }, { ip: '10.0.0.2' }]));
    expect(calls.map((c) => c.op)).toEqual(['add']);
    expect(calls[0]?.ep.metadata).toEqual({ namespace: 'ns', name: 'web' });
    expect(lists(calls[0]?.ep)).toEqual({ http: ['10.0.0.1:80', '10.0.0.2:80'] });
    expect(calls[0]?.ep.subsets?.[0]?.ports).toEqual([{ name: 'http', port: 80, protocol: 'TCP' }]);
    expect(merger.endpointsFor('ns', 'web')).toBe(calls[0]?.ep);
  });

  it('merges all slices of a Service and counts an address once', () => {
    const { calls, merger } = recorder();
    merger.onEndpointSliceAdd(slice('a', 'web', [{ ip: '10.0.0.2' }, { ip: '10.0.0.1' }]));
    merger.onEndpointSliceAdd(slice('b', 'web', [{ ip: '10.0.0.3' }, { ip: '10.0.0.1' }]));
    expect(calls.map((c) => c.op)).toEqual(['add', 'update']);
    expect(calls[1]?.old).toBe(calls[0]?.ep);
    expect(lists(last(calls))).toEqual({ http: ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80'] });
  });

  it('counts an absent ready condition as ready and leaves ready=false out', () => {
    const { calls, merger } = recorder();
    merger.onEndpointSliceAdd(
      slice('a', 'web', [
        { ip: '10.0.0.1' },
        { ip: '10.0.0.2', ready: true },
        { ip: '10.0.0.3', ready: false },
        { ip: '10.0.0.4', ready: false, serving: true, terminating: true },
      ]),
    );
    expect(lists(last(calls))).toEqual({ http: ['10.0.0.1:80', '10.0.0.2:80'] });
  });

  it('reads null conditions as absent and never sends traffic on a garbage condition', () => {
    const { calls, merger } = recorder();
    const s = slice('a', 'web', []);
    s.endpoints = [
      { addresses: ['10.0.0.1'], conditions: { ready: null } },
      { addresses: ['10.0.0.2'], conditions: { ready: 'false' } },
      { addresses: ['10.0.0.3'], conditions: { ready: 0, serving: 'yes', terminating: true } },
      { addresses: ['10.0.0.4'], conditions: { ready: false, serving: null, terminating: true } },
    ] as unknown as EndpointSlice['endpoints'];
    merger.onEndpointSliceAdd(s);
    expect(lists(last(calls))).toEqual({ http: ['10.0.0.1:80'] });
    const fallback = slice('a', 'web', []);
    fallback.endpoints = s.endpoints.slice(1);
    merger.onEndpointSliceUpdate(s, fallback);
    expect(lists(last(calls))).toEqual({ http: ['10.0.0.4:80'] });
  });

  it('falls back, per port, to serving terminating endpoints when none is ready', () => {
    const { calls, merger } = recorder();
    const http = [{ name: 'http', port: 80 }];
    const dns = [{ name: 'dns', port: 53, protocol: 'UDP' as const }];
    merger.onEndpointSliceAdd(
      slice(
        'a',
        'web',
        [
          { ip: '10.0.0.1', ready: false, serving: true, terminating: true },
          { ip: '10.0.0.2', ready: false, terminating: true }, // serving absent counts as serving
          { ip: '10.0.0.3', ready: false, serving: false, terminating: true },
          { ip: '10.0.0.4', ready: false, serving: true }, // not terminating: starting up
        ],
        http,
      ),
    );
    expect(lists(last(calls))).toEqual({ http: ['10.0.0.1:80', '10.0.0.2:80'] });
    // One ready endpoint for "http" ends the fallback for "http" only.
    merger.onEndpointSliceAdd(slice('b', 'web', [{ ip: '10.0.0.9' }], http));
    merger.onEndpointSliceAdd(
      slice('c', 'web', [{ ip: '10.0.1.1', ready: false, terminating: true }], dns),
    );
    expect(lists(last(calls))).toEqual({ http: ['10.0.0.9:80'], dns: ['10.0.1.1:53'] });
  });

  it('groups a port name that slices number differently, and round-trips exactly', () => {
    const { calls, merger } = recorder();
    merger.onEndpointSliceAdd(
      slice('a', 'web', [{ ip: '10.0.0.2' }], [{ name: 'http', port: 8080 }]),
    );
    merger.onEndpointSliceAdd(
      slice('b', 'web', [{ ip: '10.0.0.1' }, { ip: '10.0.0.2' }], [{ name: 'http', port: 80 }]),
    );
    merger.onEndpointSliceAdd(
      slice('c', 'web', [{ ip: 'fd00::1' }], [{ name: 'http', port: 80 }], { addressType: 'IPv6' }),
    );
    const ep = last(calls);
    expect(lists(ep)).toEqual({
      http: ['10.0.0.1:80', '10.0.0.2:80', '[fd00::1]:80', '10.0.0.2:8080'],
    });
    expect(ep?.subsets).toHaveLength(2);
  });

  it('round-trips random slice sets to exactly the merged lists (seeded property test)', () => {
    const random = mulberry32(2024);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
    const cond = [undefined, true, false] as const;
    for (let round = 0; round < 300; round++) {
      const slices = Array.from({ length: 1 + Math.floor(random() * 4) }, (_, i) => {
        const ports = Array.from({ length: 1 + Math.floor(random() * 2) }, () => ({
          name: pick(['a', 'b', '']),
          port: pick([80, 81, 8080]),
        })).filter((p, j, all) => all.findIndex((q) => q.name === p.name) === j);
        const endpoints = Array.from({ length: Math.floor(random() * 4) }, () => ({
          ip: pick(['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.10', '10.0.1.1']),
          ready: pick(cond),
          serving: pick(cond),
          terminating: pick(cond),
        }));
        return { name: `s${i}`, ports, endpoints };
      });
      // The rules, written out plainly.
      const expected: Record<string, Set<string>> = {};
      for (const name of ['a', 'b', '']) {
        const take = (ok: (e: (typeof slices)[number]['endpoints'][number]) => boolean) =>
          new Set(
            slices.flatMap((sl) =>
              sl.ports
                .filter((p) => p.name === name)
                .flatMap((p) => sl.endpoints.filter(ok).map((e) => `${e.ip}:${p.port}`)),
            ),
          );
        const ready = take((e) => e.ready !== false);
        const fallback = take(
          (e) => e.ready === false && e.serving !== false && e.terminating === true,
        );
        const chosen = ready.size > 0 ? ready : fallback;
        if (chosen.size > 0) expected[name] = chosen;
      }
      const { calls, merger } = recorder();
      for (const sl of slices) {
        merger.onEndpointSliceAdd(
          slice(
            sl.name,
            'web',
            sl.endpoints.map(
              ({ ip, ...c }) =>
                Object.fromEntries(
                  Object.entries({ ip, ...c }).filter(([, v]) => v !== undefined),
                ) as Ep,
            ),
            sl.ports,
          ),
        );
      }
      const got = lists(last(calls));
      expect(Object.keys(got).sort(), `round ${round}`).toEqual(Object.keys(expected).sort());
      for (const [name, list] of Object.entries(got)) {
        expect(new Set(list).size, `round ${round} duplicates`).toBe(list.length);
        expect([...list].sort(), `round ${round} ${name}`).toEqual(
          [...(expected[name] ?? [])].sort(),
        );
      }
    }
  });

  it('skips ports without a number, invalid ports and invalid or mismatched addresses', () => {
    const logger = spyLogger();
    const calls: Endpoints[] = [];
    const merger = new EndpointSliceMerger(
      { ...noopTarget(), onEndpointsAdd: (ep) => calls.push(ep) },
      { logger },
    );
    merger.onEndpointSliceAdd(
      slice(
        'a',
        'web',
        [{ ip: '10.0.0.1' }, { ip: 'fd00::1' }, { ip: 'garbage' }, { ip: '10.0.0.256' }],
        [{ name: 'all' }, { name: 'big', port: 70_000 }, { name: 'ok', port: 443 }],
      ),
    );
    expect(lists(calls[0])).toEqual({ ok: ['10.0.0.1:443'] });
    expect(logger.debug).toHaveBeenCalled();
  });

  it('ignores FQDN slices and slices without the service-name label', () => {
    const logger = spyLogger();
    const { calls, target } = recorder();
    const merger = new EndpointSliceMerger(target, { logger });
    merger.onEndpointSliceAdd(
      slice('a', 'web', [{ ip: '10.0.0.1' }], undefined, { addressType: 'FQDN' }),
    );
    merger.onEndpointSliceAdd(slice('b', undefined, [{ ip: '10.0.0.1' }]));
    expect(calls).toEqual([]);
    expect(logger.debug.mock.calls.map((c) => String(c[0])).join('\n')).toMatch(
      /ns\/b: no kubernetes\.io\/service-name label/,
    );
  });

  it('delivers nothing when the merged result did not change', () => {
    const { calls, merger } = recorder();
    const a = slice('a', 'web', [{ ip: '10.0.0.1' }, { ip: '10.0.0.2' }]);
    merger.onEndpointSliceAdd(a);
    merger.onEndpointSliceUpdate(a, a); // resync
    const reordered = slice('a', 'web', [{ ip: '10.0.0.2' }, { ip: '10.0.0.1' }]);
    merger.onEndpointSliceUpdate(a, {
      ...reordered,
      endpoints: reordered.endpoints.map((e) => ({ ...e, zone: 'z' })),
    });
    merger.onEndpointSliceAdd(slice('b', 'web', [{ ip: '10.0.0.1' }])); // duplicate address
    merger.onEndpointSliceAdd(slice('c', 'web', [{ ip: '10.0.0.7', ready: false }])); // not ready
    expect(calls.map((c) => c.op)).toEqual(['add']);
  });

  it('delivers an update when an endpoint changes, and a delete when the last slice goes', () => {
    const { calls, merger } = recorder();
    const a = slice('a', 'web', [{ ip: '10.0.0.1' }]);
    const b = slice('b', 'web', [{ ip: '10.0.0.2' }]);
    merger.onEndpointSliceAdd(a);
    merger.onEndpointSliceAdd(b);
    const a2 = slice('a', 'web', [{ ip: '10.0.0.1', ready: false }]);
    merger.onEndpointSliceUpdate(a, a2);
    expect(lists(last(calls))).toEqual({ http: ['10.0.0.2:80'] });
    merger.onEndpointSliceDelete(b);
    expect(calls.at(-1)?.op).toBe('update');
    expect(lists(last(calls))).toEqual({});
    const before = last(calls);
    merger.onEndpointSliceDelete(a2);
    expect(calls.map((c) => c.op)).toEqual(['add', 'update', 'update', 'update', 'delete']);
    expect(last(calls)).toBe(before);
    expect(merger.endpointsFor('ns', 'web')).toBeUndefined();
    merger.onEndpointSliceDelete(a2); // unknown now: nothing
    expect(calls).toHaveLength(5);
  });

  it('treats an update of an unknown slice as an add', () => {
    const { calls, merger } = recorder();
    const a = slice('a', 'web', [{ ip: '10.0.0.1' }]);
    merger.onEndpointSliceUpdate(a, a);
    expect(calls.map((c) => c.op)).toEqual(['add']);
  });

  it('deletes by slice name, whatever labels the deleted object carries', () => {
    const { calls, merger } = recorder();
    merger.onEndpointSliceAdd(slice('a', 'web', [{ ip: '10.0.0.1' }]));
    merger.onEndpointSliceDelete(slice('a', undefined, []));
    expect(calls.map((c) => c.op)).toEqual(['add', 'delete']);
  });

  it('moves a slice whose service-name label changes, or drops it when the label goes', () => {
    const { calls, merger } = recorder();
    const a = slice('a', 'web', [{ ip: '10.0.0.1' }]);
    merger.onEndpointSliceAdd(a);
    merger.onEndpointSliceAdd(slice('b', 'web', [{ ip: '10.0.0.2' }]));
    const moved = slice('a', 'api', [{ ip: '10.0.0.1' }]);
    merger.onEndpointSliceUpdate(a, moved);
    expect(calls.slice(2).map((c) => [c.op, c.ep.metadata.name])).toEqual([
      ['update', 'web'],
      ['add', 'api'],
    ]);
    expect(lists(merger.endpointsFor('ns', 'web'))).toEqual({ http: ['10.0.0.2:80'] });
    merger.onEndpointSliceUpdate(moved, slice('a', undefined, [{ ip: '10.0.0.1' }]));
    expect(calls.at(-1)?.op).toBe('delete');
    expect(merger.endpointsFor('ns', 'api')).toBeUndefined();
  });

  it('keeps namespaces apart, defaulting an absent one to "default"', () => {
    const { calls, merger } = recorder();
    merger.onEndpointSliceAdd(
      slice('a', 'web', [{ ip: '10.0.0.1' }], undefined, { namespace: 'x' }),
    );
    merger.onEndpointSliceAdd(
      slice('a', 'web', [{ ip: '10.0.0.2' }], undefined, { namespace: 'y' }),
    );
    const noNs = slice('a', 'web', [{ ip: '10.0.0.3' }]);
    delete noNs.metadata.namespace;
    merger.onEndpointSliceAdd(noNs);
    expect(calls.map((c) => [c.op, c.ep.metadata.namespace])).toEqual([
      ['add', 'x'],
      ['add', 'y'],
      ['add', 'default'],
    ]);
  });

  it('delivers an empty Add for a Service whose slices have no endpoint yet', () => {
    const { calls, merger } = recorder();
    merger.onEndpointSliceAdd(slice('a', 'web', []));
    expect(calls.map((c) => c.op)).toEqual(['add']);
    expect(calls[0]?.ep.subsets).toEqual([]);
  });

  it('passes synced on', () => {
    const { calls, merger } = recorder();
    merger.onEndpointSlicesSynced();
    expect(calls.map((c) => c.op)).toEqual(['synced']);
  });

  it('survives garbage slices', () => {
    const { calls, merger } = recorder();
    const garbage = [
      null,
      5,
      {},
      { metadata: { name: '' } },
      { metadata: { name: 'g', labels: { 'kubernetes.io/service-name': 'web' } } },
      {
        metadata: { name: 'h', labels: { 'kubernetes.io/service-name': 'web' } },
        addressType: 'IPv4',
        endpoints: 'x',
        ports: 'y',
      },
      { metadata: { name: 'i', labels: 7 }, addressType: 'IPv4', endpoints: [] },
      {
        metadata: { name: 'j', namespace: 'ns', labels: { 'kubernetes.io/service-name': 'web' } },
        addressType: 'IPv4',
        endpoints: [
          null,
          { addresses: 'x' },
          { addresses: [] },
          { addresses: [1] },
          { addresses: ['10.0.0.1'], conditions: 5 },
        ],
        ports: [null, { port: 80, name: 5 }, { port: 80 }],
      },
      {
        metadata: { name: 'k', labels: { 'kubernetes.io/service-name': 'web' } },
        addressType: 'IPv4',
        get endpoints(): never {
          throw new Error('boom');
        },
      },
    ];
    for (const g of garbage) {
      expect(() => merger.onEndpointSliceAdd(g as unknown as EndpointSlice)).not.toThrow();
      expect(() =>
        merger.onEndpointSliceUpdate(g as unknown as EndpointSlice, g as unknown as EndpointSlice),
      ).not.toThrow();
      expect(() => merger.onEndpointSliceDelete(g as unknown as EndpointSlice)).not.toThrow();
    }
    const added = calls.filter((c) => c.op === 'add').map((c) => lists(c.ep));
    expect(added).toContainEqual({ '': ['10.0.0.1:80'] });
  });

  it('keeps its state right when the target throws', () => {
    const logger = spyLogger();
    const seen: Endpoints[] = [];
    const merger = new EndpointSliceMerger(
      {
        ...noopTarget(),
        onEndpointsAdd: () => {
          throw new Error('target broke');
        },
        onEndpointsUpdate: (_old, ep) => seen.push(ep),
      },
      { logger },
    );
    merger.onEndpointSliceAdd(slice('a', 'web', [{ ip: '10.0.0.1' }]));
    expect(logger.error).toHaveBeenCalledTimes(1);
    merger.onEndpointSliceAdd(slice('b', 'web', [{ ip: '10.0.0.2' }]));
    expect(lists(seen[0])).toEqual({ http: ['10.0.0.1:80', '10.0.0.2:80'] });
  });

  it('never reads other slices again when one Service changes', () => {
    let reads = 0;
    const counted = (s: EndpointSlice): EndpointSlice =>
      new Proxy(s, {
        get(t, p, r) {
          reads++;
          return Reflect.get(t, p, r);
        },
      });
    const { calls, merger } = recorder();
    for (let i = 0; i < 200; i++) {
      merger.onEndpointSliceAdd(counted(slice(`s${i}`, `svc${i % 50}`, [{ ip: `10.0.${i}.1` }])));
    }
    const afterAdds = reads;
    const before = calls.length;
    for (let i = 0; i < 100; i++) {
      merger.onEndpointSliceUpdate(
        slice('x', 'other', []),
        slice('x', 'other', [{ ip: `10.9.0.${i + 1}` }]),
      );
    }
    expect(reads).toBe(afterAdds);
    expect(calls.length - before).toBe(100);
    expect(lists(merger.endpointsFor('ns', 'svc0'))).toEqual({
      http: ['10.0.0.1:80', '10.0.100.1:80', '10.0.150.1:80', '10.0.50.1:80'],
    });
  });
});

function noopTarget(): EndpointsHandler {
  return {
    onEndpointsAdd: () => undefined,
    onEndpointsUpdate: () => undefined,
    onEndpointsDelete: () => undefined,
    onEndpointsSynced: () => undefined,
  };
}

describe('the lists the balancer gets from a merged object', () => {
  it('are the merger’s own, shared and frozen, equal to reading the object afresh', () => {
    const { calls, merger } = recorder();
    merger.onEndpointSliceAdd(
      slice(
        'web-a',
        'web',
        [{ ip: '10.0.0.2' }, { ip: '10.0.0.1' }],
        [
          { name: 'http', port: 80, protocol: 'TCP' },
          { name: 'dns', port: 53, protocol: 'UDP' },
        ],
      ),
    );
    const delivered = calls[0]?.ep as Endpoints;
    const first = buildPortsToEndpointsMap(delivered);
    const second = buildPortsToEndpointsMap(delivered);
    expect(second).not.toBe(first);
    expect(second.get('http')).toBe(first.get('http'));
    expect(Object.isFrozen(first.get('http'))).toBe(true);
    // What a fresh read of an equal object (not the delivered one) gives.
    const fresh = buildPortsToEndpointsMap(structuredClone(delivered));
    expect(Object.fromEntries(first)).toEqual(Object.fromEntries(fresh));
  });

  it('makes a subset’s addresses on first read, then holds them as plain data', () => {
    const { calls, merger } = recorder();
    const ports: EndpointSlice['ports'] = [
      { name: 'http', port: 80 },
      { name: 'http', port: 81 },
    ];
    merger.onEndpointSliceAdd(
      slice('web-v6', 'web', [{ ip: 'fd00::2' }], [{ name: 'http', port: 80 }], {
        addressType: 'IPv6',
      }),
    );
    merger.onEndpointSliceAdd(
      slice('web-v4', 'web', [{ ip: '10.0.0.2' }, { ip: '10.0.0.1' }], ports),
    );
    const ep = last(calls) as Endpoints;
    const plain = {
      apiVersion: 'v1',
      kind: 'Endpoints',
      metadata: { namespace: 'ns', name: 'web' },
      subsets: [
        {
          addresses: [{ ip: '10.0.0.1' }, { ip: '10.0.0.2' }, { ip: 'fd00::2' }],
          ports: [{ name: 'http', port: 80 }],
        },
        {
          addresses: [{ ip: '10.0.0.1' }, { ip: '10.0.0.2' }],
          ports: [{ name: 'http', port: 81 }],
        },
      ],
    };
    // Every way of reading it sees plain data: keys, JSON, a clone, a spread.
    expect(Object.keys(ep.subsets?.[1] ?? {})).toEqual(['addresses', 'ports']);
    expect(structuredClone(ep)).toStrictEqual(plain);
    expect(JSON.parse(JSON.stringify(ep))).toEqual(plain);
    expect({ ...ep.subsets?.[0] }).toEqual(plain.subsets[0]);
    expect(ep).toEqual(plain);
    // Read once, then kept: the same array each time, and an ordinary writable property.
    const subset = ep.subsets?.[0] as NonNullable<Endpoints['subsets']>[number];
    expect(subset.addresses).toBe(subset.addresses);
    expect(Object.getOwnPropertyDescriptor(subset, 'addresses')).toMatchObject({ writable: true });
    subset.addresses = [{ ip: '10.9.9.9' }];
    expect(subset.addresses).toEqual([{ ip: '10.9.9.9' }]);
    // Never read before: assigning works too, and so does reading a frozen one.
    const other = ep.subsets?.[1] as NonNullable<Endpoints['subsets']>[number];
    other.addresses = [];
    expect(other.addresses).toEqual([]);
    const frozen = Object.freeze(calls[0]?.ep.subsets?.[0] ?? {});
    expect(frozen.addresses).toEqual([{ ip: 'fd00::2' }]);
  });
});
