import { GCProfiler } from 'node:v8';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import {
  InvalidOptionError,
  MalformedSourceAddressError,
  MissingEndpointsError,
  MissingServiceEntryError,
} from '../errors.js';
import type { Addr, Endpoints } from '../model/model.js';
import { type ServicePortName, splitHostPort } from '../model/service-port-name.js';
import { spyLogger } from '../test-support/spy-logger.js';
import {
  DEFAULT_MAX_AFFINITY_RECORDS,
  RoundRobinLoadBalancer,
  type RoundRobinLoadBalancerOptions,
} from './load-balancer-round-robin.js';
import { mulberry32 } from './random.js';

const svc = (port = 'p', name = 'web', namespace = 'ns'): ServicePortName => ({
  namespace,
  name,
  port,
});

/** An Endpoints object from `{ portName: ["host:port", …] }` (joinHostPort's form). */
function eps(name: string, ports: Record<string, string[]>, namespace = 'ns'): Endpoints {
  return {
    metadata: { namespace, name },
    subsets: Object.entries(ports).flatMap(([portName, list]) =>
      list.map((hostPort) => {
        const { host, port } = splitHostPort(hostPort) ?? { host: hostPort, port: 0 };
        return { addresses: [{ ip: host }], ports: [{ name: portName, port }] };
      }),
    ),
  };
}

const client = (i: number, port = 40_000): Addr => ({ address: `192.168.0.${i}`, port });

let now = 0;
function makeLB(options: RoundRobinLoadBalancerOptions = {}) {
  return new RoundRobinLoadBalancer({ random: mulberry32(1), now: () => now, ...options });
}

function picks(lb: RoundRobinLoadBalancer, n: number, port = svc(), src: Addr | null = null) {
  return Array.from({ length: n }, () => lb.nextEndpoint(port, src, false));
}

const three = { p: ['endpoint1:1', 'endpoint2:2', 'endpoint3:3'] };

beforeEach(() => {
  now = 1_700_000_000_000;
});

describe('errors', () => {
  it('throws MissingServiceEntryError for an unknown Service port', () => {
    const lb = makeLB();
    expect(() => lb.nextEndpoint(svc(), null, false)).toThrow(MissingServiceEntryError);
    try {
      lb.nextEndpoint(svc('http'), null, false);
    } catch (error) {
      expect((error as MissingServiceEntryError).code).toBe('ERR_MISSING_SERVICE_ENTRY');
      expect((error as Error).message).toContain('ns/web:http');
    }
  });

  it('throws MissingEndpointsError before looking at srcAddr', () => {
    const lb = makeLB();
    lb.newService(svc(), 'ClientIP', 0);
    expect(() => lb.nextEndpoint(svc(), null, false)).toThrow(MissingEndpointsError);
    expect(() => lb.nextEndpoint(svc(), null, true)).toThrow(MissingEndpointsError);
    expect(lb.serviceHasEndpoints(svc())).toBe(false);
  });

  it('throws MalformedSourceAddressError for a null or garbage client with affinity on', () => {
    const lb = makeLB();
    lb.newService(svc(), 'ClientIP', 0);
    lb.onEndpointsAdd(eps('web', three));
    for (const bad of [null, { address: 'garbage', port: 1 }, { address: 5 }, { port: 1 }, {}]) {
      expect(() => lb.nextEndpoint(svc(), bad as Addr, false), JSON.stringify(bad)).toThrow(
        MalformedSourceAddressError,
      );
    }
    // Nothing was consumed by the failed picks.
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(lb.endpoints(svc())[0]);
    expect(lb.stickySessionCount(svc())).toBe(1);
  });

  it('accepts a null client without affinity', () => {
    const lb = makeLB();
    lb.newService(svc(), 'None', 0);
    lb.onEndpointsAdd(eps('web', three));
    expect(() => lb.nextEndpoint(svc(), null, false)).not.toThrow();
  });

  it('rejects an invalid maxAffinityRecords', () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) {
      expect(() => makeLB({ maxAffinityRecords: bad })).toThrow(InvalidOptionError);
    }
    expect(() => makeLB({ maxAffinityRecords: Number.POSITIVE_INFINITY })).not.toThrow();
    expect(DEFAULT_MAX_AFFINITY_RECORDS).toBe(100_000);
  });
});

describe('round robin', () => {
  it('always returns a single endpoint', () => {
    const lb = makeLB();
    lb.onEndpointsAdd(eps('web', { p: ['endpoint1:40'] }));
    expect(picks(lb, 3)).toEqual(['endpoint1:40', 'endpoint1:40', 'endpoint1:40']);
  });

  it('cycles through the shuffled list, one step per pick', () => {
    const lb = makeLB();
    lb.onEndpointsAdd(eps('web', three));
    const order = lb.endpoints(svc());
    expect([...order].sort()).toEqual(three.p);
    expect(picks(lb, 7)).toEqual([...order, ...order, order[0]]);
    expect(lb.serviceHasEndpoints(svc())).toBe(true);
  });

  it('shuffles a copy with the injected source and hands out a frozen list', () => {
    const lb = makeLB({ random: () => 0 });
    const object = eps('web', three);
    const copy = structuredClone(object);
    lb.onEndpointsAdd(object);
    // Fisher–Yates with a source that always gives 0 rotates the list by one.
    expect(lb.endpoints(svc())).toEqual(['endpoint2:2', 'endpoint3:3', 'endpoint1:1']);
    expect(Object.isFrozen(lb.endpoints(svc()))).toBe(true);
    expect(object).toEqual(copy);
  });

  it('spreads the first pick of many Services over the endpoints', () => {
    const lb = new RoundRobinLoadBalancer({ random: mulberry32(99) });
    const first = new Set<string>();
    for (let i = 0; i < 30; i++) {
      lb.onEndpointsAdd(eps(`svc${i}`, three));
      first.add(lb.nextEndpoint(svc('p', `svc${i}`), null, false));
    }
    expect(first.size).toBe(3);
  });

  it('keeps ports and namespaces apart, an absent namespace being "default"', () => {
    const lb = makeLB();
    lb.onEndpointsAdd(eps('web', { a: ['endpoint1:1'], b: ['endpoint2:2', 'endpoint3:3'] }));
    lb.onEndpointsAdd(eps('web', { a: ['endpoint9:9'] }, 'other'));
    lb.onEndpointsAdd({ ...eps('web', { a: ['endpoint8:8'] }), metadata: { name: 'web' } });
    expect(picks(lb, 2, svc('a'))).toEqual(['endpoint1:1', 'endpoint1:1']);
    expect(new Set(picks(lb, 2, svc('b')))).toEqual(new Set(['endpoint2:2', 'endpoint3:3']));
    expect(picks(lb, 1, svc('a', 'web', 'other'))).toEqual(['endpoint9:9']);
    expect(picks(lb, 1, svc('a', 'web', 'default'))).toEqual(['endpoint8:8']);
  });

  it('lists an endpoint once even when the object repeats it', () => {
    const lb = makeLB();
    lb.onEndpointsAdd(eps('web', { p: ['endpoint1:1', 'endpoint1:1', 'endpoint2:2'] }));
    expect(lb.endpoints(svc())).toHaveLength(2);
  });

  it('follows a ServicePortName object whose fields change (no stale key cache)', () => {
    const lb = makeLB();
    lb.onEndpointsAdd(eps('web', { a: ['endpoint1:1'], b: ['endpoint2:2'] }));
    const name = svc('a');
    expect(lb.nextEndpoint(name, null, false)).toBe('endpoint1:1');
    name.port = 'b';
    expect(lb.nextEndpoint(name, null, false)).toBe('endpoint2:2');
  });

  it('sees a port deleted and re-created through the same ServicePortName object', () => {
    const lb = makeLB();
    const name = svc();
    lb.newService(name, 'ClientIP', 0);
    lb.onEndpointsAdd(eps('web', three));
    lb.nextEndpoint(name, client(1), false);
    lb.deleteService(name);
    expect(() => lb.nextEndpoint(name, client(1), false)).toThrow(MissingServiceEntryError);
    lb.newService(name, 'None', 0);
    expect(lb.stickySessionCount(name)).toBe(0);
    expect(lb.nextEndpoint(name, client(1), false)).toBe(lb.endpoints(name)[0]);
    lb.deleteService(name);
    lb.onEndpointsDelete(eps('web', three));
    lb.onEndpointsAdd(eps('web', { p: ['endpoint7:7'] }));
    expect(lb.nextEndpoint(name, null, false)).toBe('endpoint7:7');
    lb.onEndpointsDelete(eps('web', { p: ['endpoint7:7'] }));
    expect(() => lb.nextEndpoint(name, null, false)).toThrow(MissingServiceEntryError);
    lb.onEndpointsAdd(eps('web', { p: ['endpoint8:8'] }));
    expect(lb.nextEndpoint(name, null, false)).toBe('endpoint8:8');
  });

  it('allocates nothing per round-robin pick', () => {
    const lb = makeLB();
    lb.onEndpointsAdd(eps('web', three));
    const name = svc();
    const loop = (n: number) => {
      let x = 0;
      for (let i = 0; i < n; i++) x += lb.nextEndpoint(name, null, false).length;
      return x;
    };
    loop(200_000); // warm-up: let the JIT optimise
    const profiler = new GCProfiler();
    profiler.start();
    loop(3_000_000);
    const gcs = profiler.stop()?.statistics ?? [];
    // 16 bytes per pick would be 48 MB: many scavenges. One is tolerated (a nearly full new space).
    expect(gcs.length).toBeLessThanOrEqual(1);
  });
});

describe('endpoint changes', () => {
  it('changes nothing when an update carries the same set in another order', () => {
    const lb = makeLB();
    lb.onEndpointsAdd(eps('web', three));
    const order = lb.endpoints(svc());
    lb.nextEndpoint(svc(), null, false);
    lb.onEndpointsUpdate(eps('web', three), eps('web', { p: [...three.p].reverse() }));
    lb.onEndpointsAdd(eps('web', three)); // a relist
    expect(lb.endpoints(svc())).toBe(order);
    expect(lb.nextEndpoint(svc(), null, false)).toBe(order[1]);
  });

  it('reshuffles and restarts the rotation when the set changes', () => {
    const lb = makeLB();
    lb.onEndpointsAdd(eps('web', three));
    lb.nextEndpoint(svc(), null, false);
    const four = { p: [...three.p, 'endpoint4:4'] };
    lb.onEndpointsUpdate(eps('web', three), eps('web', four));
    const order = lb.endpoints(svc());
    expect([...order].sort()).toEqual(four.p);
    expect(picks(lb, 4)).toEqual(order);
  });

  it('resets a port the update no longer names and keeps the others', () => {
    const lb = makeLB();
    const both = eps('web', { a: ['endpoint1:1'], b: ['endpoint2:2'] });
    lb.onEndpointsAdd(both);
    lb.onEndpointsUpdate(both, eps('web', { a: ['endpoint1:1'] }));
    expect(() => lb.nextEndpoint(svc('b'), null, false)).toThrow(MissingServiceEntryError);
    expect(lb.nextEndpoint(svc('a'), null, false)).toBe('endpoint1:1');
  });

  it('keeps a registered port’s entry (and affinity settings) when its endpoints go', () => {
    const lb = makeLB();
    lb.newService(svc('b'), 'ClientIP', 60);
    const both = eps('web', { a: ['endpoint1:1'], b: ['endpoint2:2', 'endpoint3:3'] });
    lb.onEndpointsAdd(both);
    lb.onEndpointsUpdate(both, eps('web', { a: ['endpoint1:1'] }));
    expect(() => lb.nextEndpoint(svc('b'), null, false)).toThrow(MissingEndpointsError);
    lb.onEndpointsAdd(both);
    const first = lb.nextEndpoint(svc('b'), client(1), false);
    expect(picks(lb, 3, svc('b'), client(1))).toEqual([first, first, first]);
  });

  it('treats an Add as the whole truth: ports it does not name are reset', () => {
    const lb = makeLB();
    lb.newService(svc('b'), 'None', 0);
    lb.onEndpointsAdd(eps('web', { a: ['endpoint1:1'], b: ['endpoint2:2'] }));
    lb.onEndpointsAdd(eps('web', { a: ['endpoint1:1'] }));
    expect(lb.serviceHasEndpoints(svc('b'))).toBe(false);
  });

  it('resets the old name’s ports when an update changes the object’s name', () => {
    const lb = makeLB();
    lb.newService(svc('p', 'old'), 'None', 0);
    const old = eps('old', three);
    lb.onEndpointsAdd(old);
    lb.onEndpointsUpdate(old, eps('new', three));
    expect(lb.serviceHasEndpoints(svc('p', 'old'))).toBe(false);
    expect(lb.serviceHasEndpoints(svc('p', 'new'))).toBe(true);
  });

  it('resets every port on delete, even for an object without subsets', () => {
    const lb = makeLB();
    lb.newService(svc('a'), 'None', 0);
    lb.newService(svc('b'), 'None', 0);
    lb.onEndpointsAdd(eps('web', { a: ['endpoint1:1'], b: ['endpoint2:2'] }));
    lb.onEndpointsDelete({ metadata: { namespace: 'ns', name: 'web' } });
    expect(lb.serviceHasEndpoints(svc('a'))).toBe(false);
    expect(() => lb.nextEndpoint(svc('b'), null, false)).toThrow(MissingEndpointsError);
  });

  it('forgets a port that only endpoints created once they are gone', () => {
    const lb = makeLB();
    lb.onEndpointsAdd(eps('web', three));
    lb.onEndpointsDelete(eps('web', three));
    expect(() => lb.nextEndpoint(svc(), null, false)).toThrow(MissingServiceEntryError);
  });

  it('survives garbage objects', () => {
    const lb = makeLB();
    const garbage = [null, 5, {}, { metadata: {} }, { metadata: { name: 'x' }, subsets: 'y' }];
    for (const g of garbage) {
      const e = g as unknown as Endpoints;
      expect(() => lb.onEndpointsAdd(e)).not.toThrow();
      expect(() => lb.onEndpointsUpdate(e, e)).not.toThrow();
      expect(() => lb.onEndpointsDelete(e)).not.toThrow();
    }
    expect(() => lb.onEndpointsSynced()).not.toThrow();
  });
});

describe('endpoints before the Service (kubernetes#25314)', () => {
  it('serves endpoints that arrive first, then turns affinity on without a restart', () => {
    const lb = makeLB();
    lb.onEndpointsAdd(eps('web', three));
    const order = lb.endpoints(svc());
    expect(picks(lb, 2, svc(), client(1))).toEqual([order[0], order[1]]); // no affinity yet
    lb.newService(svc(), 'ClientIP', 0);
    expect(lb.endpoints(svc())).toBe(order);
    const sticky = lb.nextEndpoint(svc(), client(1), false);
    expect(sticky).toBe(order[2]); // the rotation went on
    expect(picks(lb, 3, svc(), client(1))).toEqual([sticky, sticky, sticky]);
  });

  it('keeps ClientIP when the Service is scaled to 0 and back', () => {
    const lb = makeLB();
    lb.newService(svc(), 'ClientIP', 0);
    lb.onEndpointsAdd(eps('web', three));
    lb.nextEndpoint(svc(), client(1), false);
    lb.onEndpointsUpdate(eps('web', three), eps('web', {}));
    expect(lb.stickySessionCount(svc())).toBe(0);
    lb.onEndpointsUpdate(eps('web', {}), eps('web', three));
    const first = lb.nextEndpoint(svc(), client(2), false);
    expect(picks(lb, 3, svc(), client(2))).toEqual([first, first, first]);
  });

  it('keeps ClientIP when the Endpoints object is deleted and re-created', () => {
    const lb = makeLB();
    lb.newService(svc(), 'ClientIP', 0);
    lb.onEndpointsAdd(eps('web', three));
    lb.onEndpointsDelete(eps('web', three));
    lb.onEndpointsAdd(eps('web', three));
    const first = lb.nextEndpoint(svc(), client(2), false);
    expect(picks(lb, 3, svc(), client(2))).toEqual([first, first, first]);
  });

  it('gives a re-created Service its endpoints back at once', () => {
    const lb = makeLB();
    lb.newService(svc(), 'ClientIP', 0);
    lb.onEndpointsAdd(eps('web', three));
    lb.nextEndpoint(svc(), client(1), false);
    lb.deleteService(svc());
    expect(() => lb.nextEndpoint(svc(), client(1), false)).toThrow(MissingServiceEntryError);
    expect(lb.serviceHasEndpoints(svc())).toBe(false);
    expect(lb.endpoints(svc())).toEqual([]);
    lb.newService(svc(), 'ClientIP', 0);
    expect([...lb.endpoints(svc())].sort()).toEqual(three.p);
    expect(lb.stickySessionCount(svc())).toBe(0);
  });
});

describe('ClientIP affinity', () => {
  function sticky(ttl = 0, options: RoundRobinLoadBalancerOptions = {}) {
    const lb = makeLB(options);
    lb.newService(svc(), 'ClientIP', ttl);
    lb.onEndpointsAdd(eps('web', three));
    return { lb, order: lb.endpoints(svc()) };
  }

  it('pins each client and never spends a rotation slot on a sticky hit', () => {
    const { lb, order } = sticky();
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[0]);
    expect(picks(lb, 5, svc(), client(1))).toEqual(Array(5).fill(order[0]));
    expect(lb.nextEndpoint(svc(), client(2), false)).toBe(order[1]);
    expect(lb.nextEndpoint(svc(), client(3), false)).toBe(order[2]);
    expect(lb.nextEndpoint(svc(), client(4), false)).toBe(order[0]);
    expect(lb.nextEndpoint(svc(), client(2), false)).toBe(order[1]);
  });

  it('times records on a monotonic clock by default: a wall-clock step changes nothing', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      const lb = new RoundRobinLoadBalancer({ random: mulberry32(1) });
      lb.newService(svc(), 'ClientIP', 60);
      lb.onEndpointsAdd(eps('web', three));
      const pinned = lb.nextEndpoint(svc(), client(1), false);
      vi.setSystemTime(Date.now() + 3_600_000); // the wall clock jumps an hour ahead
      expect(lb.nextEndpoint(svc(), client(1), false)).toBe(pinned);
      vi.setSystemTime(Date.now() - 7_200_000); // and two hours back
      expect(lb.nextEndpoint(svc(), client(1), false)).toBe(pinned);
    } finally {
      vi.useRealTimers();
    }
  });

  it('keys on the IP only, folding IPv4-mapped IPv6 into IPv4', () => {
    const { lb } = sticky();
    const first = lb.nextEndpoint(svc(), { address: '10.9.9.9', port: 1 }, false);
    expect(lb.nextEndpoint(svc(), { address: '10.9.9.9', port: 2 }, false)).toBe(first);
    expect(lb.nextEndpoint(svc(), { address: '::ffff:10.9.9.9', port: 3 }, false)).toBe(first);
    const v6 = lb.nextEndpoint(svc(), { address: 'fd00::9', port: 3 }, false);
    expect(lb.nextEndpoint(svc(), { address: 'fd00::9', port: 4 }, false)).toBe(v6);
    expect(lb.stickySessionCount(svc())).toBe(2);
  });

  it('keeps a record while fewer than ttl whole seconds passed, refreshing it on use', () => {
    const { lb, order } = sticky(10);
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[0]);
    now += 9_999;
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[0]); // 9 whole seconds
    now += 9_999;
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[0]); // refreshed above
    now += 10_000;
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[1]); // 10 whole seconds: expired
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[1]);
  });

  it('on sessionAffinityReset takes the next endpoint and overwrites the record', () => {
    const { lb, order } = sticky();
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[0]);
    expect(lb.nextEndpoint(svc(), client(1), true)).toBe(order[1]);
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[1]);
    expect(lb.nextEndpoint(svc(), client(2), true)).toBe(order[2]); // no record yet
    expect(lb.nextEndpoint(svc(), client(2), false)).toBe(order[2]);
  });

  it('treats a reset without affinity as a plain pick', () => {
    const lb = makeLB();
    lb.onEndpointsAdd(eps('web', three));
    const order = lb.endpoints(svc());
    expect([true, true, false].map((r) => lb.nextEndpoint(svc(), client(1), r))).toEqual(order);
  });

  it('defaults the TTL to 10800 s and updates it on a later newService', () => {
    const { lb, order } = sticky(0);
    lb.nextEndpoint(svc(), client(1), false);
    now += 10_799_000;
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[0]);
    lb.newService(svc(), 'ClientIP', 10);
    now += 10_000;
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[1]);
    lb.newService(svc(), 'ClientIP', 0);
    now += 10_799_000;
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[1]);
    now += 10_800_000;
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[2]);
  });

  it('keeps the affinity type on newService with "" and clears records on None', () => {
    const { lb, order } = sticky();
    lb.newService(svc(), '', 0);
    lb.nextEndpoint(svc(), client(1), false);
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(order[0]);
    lb.newService(svc(), 'None', 0);
    expect(lb.stickySessionCount(svc())).toBe(0);
    expect(picks(lb, 2, svc(), client(1))).toEqual([order[1], order[2]]);
    lb.newService(svc(), 'ClientIP', 0);
    expect(picks(lb, 2, svc(), client(1))).toEqual([order[0], order[0]]);
  });

  it('drops records of endpoints that left on an update and keeps the others', () => {
    const { lb, order } = sticky();
    const pinned = [1, 2, 3].map((i) => lb.nextEndpoint(svc(), client(i), false));
    expect(pinned).toEqual(order);
    const gone = order[0] as string;
    const rest = { p: three.p.filter((e) => e !== gone) };
    lb.onEndpointsUpdate(eps('web', three), eps('web', rest));
    expect(lb.stickySessionCount(svc())).toBe(2);
    expect(lb.nextEndpoint(svc(), client(2), false)).toBe(pinned[1]);
    expect(lb.nextEndpoint(svc(), client(3), false)).toBe(pinned[2]);
    expect(lb.nextEndpoint(svc(), client(1), false)).toBe(lb.endpoints(svc())[0]);
  });

  it('drops records of endpoints that left on an Add too', () => {
    const { lb, order } = sticky();
    lb.nextEndpoint(svc(), client(1), false);
    lb.onEndpointsAdd(eps('web', { p: three.p.filter((e) => e !== order[0]) }));
    expect(lb.stickySessionCount(svc())).toBe(0);
  });

  it('keeps every client pinned when an endpoint is added or on a resync', () => {
    const { lb } = sticky();
    const pinned = [1, 2, 3].map((i) => lb.nextEndpoint(svc(), client(i), false));
    lb.onEndpointsUpdate(eps('web', three), eps('web', three));
    lb.onEndpointsUpdate(eps('web', three), eps('web', { p: [...three.p, 'endpoint4:4'] }));
    expect([1, 2, 3].map((i) => lb.nextEndpoint(svc(), client(i), false))).toEqual(pinned);
  });

  it('cleanupStaleStickySessions drops only records at or past the TTL', () => {
    const { lb } = sticky(10);
    lb.nextEndpoint(svc(), client(1), false);
    now += 5_000;
    lb.nextEndpoint(svc(), client(2), false);
    now += 4_999;
    lb.cleanupStaleStickySessions(svc());
    expect(lb.stickySessionCount(svc())).toBe(2);
    now += 1;
    lb.cleanupStaleStickySessions(svc());
    expect(lb.stickySessionCount(svc())).toBe(1);
    now += 5_000;
    lb.cleanupStaleStickySessions(svc());
    expect(lb.stickySessionCount(svc())).toBe(0);
    expect(() => lb.cleanupStaleStickySessions(svc('unknown'))).not.toThrow();
  });

  it('caps records per port, evicting the one assigned longest ago, and warns once', () => {
    const logger = spyLogger();
    const { lb, order } = sticky(0, { maxAffinityRecords: 2, logger });
    lb.nextEndpoint(svc(), client(1), false); // order[0]
    lb.nextEndpoint(svc(), client(2), false); // order[1]
    lb.nextEndpoint(svc(), client(1), true); // re-assigned: now the newest
    lb.nextEndpoint(svc(), client(3), false); // evicts client 2
    lb.nextEndpoint(svc(), client(4), false); // evicts client 1
    expect(lb.stickySessionCount(svc())).toBe(2);
    expect(logger.warn).toHaveBeenCalledTimes(1);
    expect(String(logger.warn.mock.calls[0]?.[0])).toMatch(/limit of 2/);
    expect(lb.nextEndpoint(svc(), client(3), false)).toBe(order[0]);
  });

  it('forgets records with deleteService', () => {
    const { lb } = sticky();
    lb.nextEndpoint(svc(), client(1), false);
    lb.deleteService(svc());
    expect(lb.stickySessionCount(svc())).toBe(0);
  });
});
