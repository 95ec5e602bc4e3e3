import { describe, expect, it, vi } from 'vitest';
import { EndpointsConfig } from '../config/endpoints-config.js';
import { NoopEndpointsHandler } from '../config/handlers-noop.js';
import { StaticInformer } from '../config/informer-static.js';
import { InvalidOptionError, InvalidPortRangeError, ProxyOnLocalhostError } from '../errors.js';
import { RoundRobinLoadBalancer } from '../load-balancing/load-balancer-round-robin.js';
import type { EndpointSlice, Endpoints, Service } from '../model/model.js';
import type { ProxySocketFactory } from '../sockets/proxy-socket.js';
import {
  endpoints,
  published,
  RecordingPortals,
  service,
  useProxierHarness,
} from '../test-support/proxier-harness.js';
import { spyLogger } from '../test-support/spy-logger.js';
import type { ProxierOptions } from './proxier.js';
import { newCustomProxier } from './proxier-factory.js';
import type { UserspaceProxier } from './proxier-userspace.js';

const start = useProxierHarness();
const syncMessages = published.syncs;
const changeMessages = published.changes;
const rejectedMessages = published.rejected;

const P = { namespace: 'ns', name: 'a', port: 'p' };

// ---------------------------------------------------------------------------------------------

describe('newCustomProxier options', () => {
  const make: ProxySocketFactory = async () => {
    throw new Error('unused');
  };
  it.each<[string, ProxierOptions, new (...args: never[]) => Error]>([
    [
      'syncPeriod < minSyncPeriod',
      { syncPeriodMs: 500, minSyncPeriodMs: 1000 },
      InvalidOptionError,
    ],
    ['negative minSyncPeriod', { minSyncPeriodMs: -1 }, InvalidOptionError],
    ['NaN syncPeriod', { syncPeriodMs: Number.NaN }, InvalidOptionError],
    ['zero udpIdleTimeout', { udpIdleTimeoutMs: 0 }, InvalidOptionError],
    ['bad listenIP', { listenIP: 'localhost' }, InvalidOptionError],
    ['bad mode', { mode: 'iptables' as 'redirect' }, InvalidOptionError],
    ['bad CIDR', { nodePortAddresses: ['10.0.0.0/40'] }, InvalidOptionError],
    ['bad nodeIPs', { nodeIPs: ['nope'] }, InvalidOptionError],
    ['bad portRange', { portRange: '30000-20000' }, InvalidPortRangeError],
    [
      'redirect rules to localhost',
      { mode: 'redirect', listenIP: '127.0.0.1', portals: new RecordingPortals() },
      ProxyOnLocalhostError,
    ],
  ])('refuses %s', async (_name, opts, errorClass) => {
    await expect(newCustomProxier(opts, make)).rejects.toBeInstanceOf(errorClass);
  });

  it('refuses a missing socket factory', async () => {
    await expect(
      newCustomProxier({}, undefined as unknown as ProxySocketFactory),
    ).rejects.toBeInstanceOf(InvalidOptionError);
  });

  it('defaults to service-port-portal mode and accepts loopback without portal rules', async () => {
    const p = (await newCustomProxier({}, make)) as UserspaceProxier;
    expect(p.mode).toBe('service-port-portal');
    const r = (await newCustomProxier(
      { mode: 'redirect', listenIP: '127.0.0.1' },
      make,
    )) as UserspaceProxier;
    expect(r.mode).toBe('redirect');
  });
});

describe('initialization', () => {
  it('does not sync before both Services and endpoints have synced', async () => {
    const logger = spyLogger();
    const h = await start({ logger }, false);
    h.proxier.onServiceAdd(service('a'));
    h.proxier.onServiceSynced();
    h.proxier.sync();
    // The requested sync ran, and declined: proof that it opened nothing, not a wait.
    await vi.waitFor(() =>
      expect(logger.debug).toHaveBeenCalledWith(
        'not syncing until Services and endpoints have been received',
      ),
    );
    expect(h.sockets.all).toHaveLength(0);
    expect(h.proxier.isInitialized()).toBe(false);
    expect(h.proxier.pendingChanges()).toBe(1);
    await h.synced(() => h.proxier.onEndpointsSynced());
    expect(h.proxier.isInitialized()).toBe(true);
    expect(h.sockets.openOn('10.0.0.1', 80)).toHaveLength(1);
  });

  it('counts EndpointSlices synced as endpoints synced', async () => {
    const h = await start({}, false);
    h.proxier.onServiceAdd(service('a'));
    await h.synced(() => {
      h.proxier.onServiceSynced();
      h.proxier.onEndpointSlicesSynced();
    });
    expect(h.proxier.isInitialized()).toBe(true);
    expect(h.sockets.open()).toHaveLength(1);
  });

  it('gives endpoints to the load balancer at once, even before initialization', async () => {
    const h = await start({}, false);
    h.proxier.onEndpointsAdd(endpoints('a', ['10.1.0.1']));
    expect(h.lb.serviceHasEndpoints(P)).toBe(true);
    const slice: EndpointSlice = {
      metadata: { namespace: 'ns', name: 'b-1', labels: { 'kubernetes.io/service-name': 'b' } },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['10.1.0.2'] }],
      ports: [{ name: 'p', port: 8080 }],
    };
    h.proxier.onEndpointSliceAdd(slice);
    expect(h.lb.nextEndpoint({ ...P, name: 'b' }, null, false)).toBe('10.1.0.2:8080');
    h.proxier.onEndpointSliceDelete(slice);
    expect(h.lb.serviceHasEndpoints({ ...P, name: 'b' })).toBe(false);
    expect(syncMessages).toHaveLength(0);
  });

  it('serves the terminating endpoints of a port whose slices have no ready one', async () => {
    const h = await start({}, false);
    const slice = (name: string, endpoints: EndpointSlice['endpoints']): EndpointSlice => ({
      metadata: { namespace: 'ns', name, labels: { 'kubernetes.io/service-name': 'a' } },
      addressType: 'IPv4',
      endpoints,
      ports: [{ name: 'p', port: 8080 }],
    });
    const draining = { ready: false, serving: true, terminating: true };
    h.proxier.onEndpointSliceAdd(slice('a-1', [{ addresses: ['10.1.0.1'], conditions: draining }]));
    expect(h.lb.nextEndpoint(P, null, false)).toBe('10.1.0.1:8080');
    // A ready endpoint in another slice of the Service takes over: no more fallback.
    h.proxier.onEndpointSliceAdd(slice('a-2', [{ addresses: ['10.1.0.2'] }]));
    expect([h.lb.nextEndpoint(P, null, false), h.lb.nextEndpoint(P, null, false)]).toEqual([
      '10.1.0.2:8080',
      '10.1.0.2:8080',
    ]);
    // Not serving any more: nothing to send traffic to.
    h.proxier.onEndpointSliceDelete(slice('a-2', []));
    h.proxier.onEndpointSliceUpdate(
      slice('a-1', [{ addresses: ['10.1.0.1'], conditions: draining }]),
      slice('a-1', [{ addresses: ['10.1.0.1'], conditions: { ...draining, serving: false } }]),
    );
    expect(h.lb.serviceHasEndpoints(P)).toBe(false);
  });
});

describe('change tracking and sync', () => {
  it('publishes serviceChange and sync, and records nothing for a resync', async () => {
    const h = await start();
    const s = service('a');
    await h.synced(() => h.proxier.onServiceAdd(s));
    expect(changeMessages).toEqual([{ service: 'ns/a' }]);
    expect(syncMessages.at(-1)).toMatchObject({ changes: 1, servicePorts: 1 });
    h.proxier.onServiceUpdate(s, s);
    h.proxier.onServiceUpdate(s, structuredClone(s));
    expect(h.proxier.pendingChanges()).toBe(0);
    expect(changeMessages).toHaveLength(1);
  });

  it('collapses add and delete before a sync into nothing', async () => {
    const h = await start({}, false);
    h.proxier.onServiceAdd(service('a'));
    h.proxier.onServiceDelete(service('a'));
    expect(h.proxier.pendingChanges()).toBe(0);
    await h.synced(() => {
      h.proxier.onServiceSynced();
      h.proxier.onEndpointsSynced();
    });
    expect(h.sockets.all).toHaveLength(0);
  });

  it('applies the collapse table: only the last state of a batch is opened', async () => {
    const h = await start({}, false);
    const at = (clusterIP: string) => service('a', { clusterIP });
    // add(S) → update(S→S′) before a sync: one proxy, for S′.
    h.proxier.onServiceAdd(at('10.0.0.5'));
    h.proxier.onServiceUpdate(at('10.0.0.5'), at('10.0.0.6'));
    await h.synced(() => {
      h.proxier.onServiceSynced();
      h.proxier.onEndpointsSynced();
    });
    expect(h.sockets.all.map((s) => s.ip)).toEqual(['10.0.0.6']);
    const first = h.proxier.getServiceInfo(P);

    // delete(S) → add(S′): S is stopped and S′ opened.
    await h.synced(() => {
      h.proxier.onServiceDelete(at('10.0.0.6'));
      h.proxier.onServiceAdd(at('10.0.0.7'));
    });
    expect(first?.isFinished()).toBe(true);
    const second = h.proxier.getServiceInfo(P);
    expect(second?.portal.ip).toBe('10.0.0.7');

    // delete(S) → add(S) with the same content: nothing to do, the proxy is kept.
    await h.synced(() => {
      h.proxier.onServiceDelete(at('10.0.0.7'));
      h.proxier.onServiceAdd(at('10.0.0.7'));
      h.proxier.sync();
    });
    expect(h.proxier.getServiceInfo(P)).toBe(second);

    // update(S→S′) → delete(S′): what was applied (S) is removed, S′ is never opened.
    await h.synced(() => {
      h.proxier.onServiceUpdate(at('10.0.0.7'), at('10.0.0.8'));
      h.proxier.onServiceDelete(at('10.0.0.8'));
    });
    expect(second?.isFinished()).toBe(true);
    expect(h.sockets.open()).toHaveLength(0);
    expect(h.sockets.all.map((s) => s.ip)).toEqual(['10.0.0.6', '10.0.0.7']);
  });

  it.each(['redirect', 'service-port-portal'] as const)(
    'swaps two node ports within one sync without a conflict (%s)',
    async (mode) => {
      const h = await start(mode === 'redirect' ? { mode, portals: new RecordingPortals() } : {});
      const np = (name: string, clusterIP: string, nodePort: number) =>
        service(name, {
          type: 'NodePort',
          clusterIP,
          ports: [{ name: 'p', port: 80, protocol: 'TCP', nodePort }],
        });
      await h.synced(() => {
        h.proxier.onServiceAdd(np('a', '10.0.0.1', 30080));
        h.proxier.onServiceAdd(np('b', '10.0.0.2', 30081));
      });
      await h.synced(() => {
        h.proxier.onServiceUpdate(np('a', '10.0.0.1', 30080), np('a', '10.0.0.1', 30081));
        h.proxier.onServiceUpdate(np('b', '10.0.0.2', 30081), np('b', '10.0.0.2', 30080));
      });
      expect(h.events).toEqual([]);
      expect(h.proxier.getServiceInfo(P, '')?.portal.port).toBe(30081);
      expect(h.proxier.getServiceInfo({ ...P, name: 'b' }, '')?.portal.port).toBe(30080);
      expect(h.sockets.openOn(null)).toHaveLength(2);
    },
  );

  it('does not touch unchanged Services on later syncs', async () => {
    const h = await start();
    await h.synced(() => {
      for (let i = 0; i < 20; i++) {
        h.proxier.onServiceAdd(service(`s${i}`, { clusterIP: `10.0.1.${i}` }));
      }
    });
    expect(h.sockets.all).toHaveLength(20);
    await h.synced(() => h.proxier.onServiceAdd(service('other', { clusterIP: '10.0.2.1' })));
    await h.synced(() => h.proxier.sync());
    expect(h.sockets.all).toHaveLength(21);
    expect(h.sockets.open()).toHaveLength(21);
  });

  it('never syncs for an endpoint change', async () => {
    // A burst of two syncs, then one an hour: the first sync spends one, and a sync that endpoint
    // events caused would spend the other, so the Service's own sync below could not run.
    const h = await start({ minSyncPeriodMs: 3_600_000 });
    h.proxier.onEndpointsAdd(endpoints('a', ['10.1.0.1']));
    h.proxier.onEndpointsUpdate(endpoints('a', ['10.1.0.1']), endpoints('a', ['10.1.0.2']));
    const before = syncMessages.length;
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    expect(syncMessages.slice(before).map((m) => m.changes)).toEqual([1]);
    expect(h.lb.nextEndpoint(P, null, false)).toBe('10.1.0.2:8080');
  });

  it('skips headless and ExternalName Services and handles ClusterIP removed and restored', async () => {
    const h = await start();
    await h.synced(() => {
      h.proxier.onServiceAdd(service('headless', { clusterIP: 'None' }));
      h.proxier.onServiceAdd(service('ext', { type: 'ExternalName', clusterIP: '' }));
      h.proxier.onServiceAdd(service('a'));
    });
    expect(h.sockets.open()).toHaveLength(1);
    await h.synced(() => h.proxier.onServiceUpdate(service('a'), service('a', { clusterIP: '' })));
    expect(h.sockets.open()).toHaveLength(0);
    expect(h.proxier.getServiceInfo(P)).toBeUndefined();
    await h.synced(() => h.proxier.onServiceUpdate(service('a', { clusterIP: '' }), service('a')));
    expect(h.proxier.getServiceInfo(P)?.isStarted()).toBe(true);
  });

  it('treats a port rename as a delete and an add', async () => {
    const h = await start();
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    const old = h.proxier.getServiceInfo(P);
    const renamed = service('a', { ports: [{ name: 'q', port: 80, protocol: 'TCP' }] });
    await h.synced(() => h.proxier.onServiceUpdate(service('a'), renamed));
    expect(old?.isFinished()).toBe(true);
    expect(h.proxier.getServiceInfo(P)).toBeUndefined();
    expect(h.proxier.getServiceInfo({ ...P, port: 'q' })?.isStarted()).toBe(true);
  });

  it('re-creates on affinity type change but updates a TTL change in place', async () => {
    const lb = new RoundRobinLoadBalancer();
    const newService = vi.spyOn(lb, 'newService');
    const h = await start({ loadBalancer: lb });
    const sticky = (timeoutSeconds: number) =>
      service('a', {
        sessionAffinity: 'ClientIP',
        sessionAffinityConfig: { clientIP: { timeoutSeconds } },
      });
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    const first = h.proxier.getServiceInfo(P);
    await h.synced(() => h.proxier.onServiceUpdate(service('a'), sticky(60)));
    const second = h.proxier.getServiceInfo(P);
    expect(first?.isFinished()).toBe(true);
    expect(second?.sessionAffinityType).toBe('ClientIP');
    await h.synced(() => h.proxier.onServiceUpdate(sticky(60), sticky(120)));
    expect(h.proxier.getServiceInfo(P)).toBe(second);
    expect(second?.stickyMaxAgeSeconds).toBe(120);
    expect(newService.mock.calls.map((c) => [c[1], c[2]])).toEqual([
      ['None', 0],
      ['ClientIP', 60],
      ['ClientIP', 120],
    ]);
  });

  it('starts an info only after the load balancer knows the port, and finishes it after close', async () => {
    const lb = new RoundRobinLoadBalancer();
    let startedWhenRegistered: boolean | undefined;
    const h = await start({ loadBalancer: lb });
    vi.spyOn(lb, 'newService').mockImplementation(() => {
      startedWhenRegistered = h.sockets.all[0]?.info?.isStarted();
    });
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    expect(startedWhenRegistered).toBe(false);
    const info = h.proxier.getServiceInfo(P);
    expect(info?.isStarted()).toBe(true);
    await h.synced(() => h.proxier.onServiceDelete(service('a')));
    expect(info?.isAlive()).toBe(false);
    expect(info?.isFinished()).toBe(true);
    expect(h.sockets.all[0]?.closed).toBe(true);
  });
});

describe('bad input', () => {
  it('ignores an invalid Service, publishes it, and keeps serving the others', async () => {
    const h = await start();
    const bad = service('bad', { ports: [{ name: 'p', port: 70_000, protocol: 'TCP' }] });
    await h.synced(() => {
      h.proxier.onServiceAdd(bad);
      h.proxier.onServiceAdd(service('a'));
    });
    expect(rejectedMessages).toEqual([expect.objectContaining({ kind: 'Service', key: 'ns/bad' })]);
    expect(h.sockets.open()).toHaveLength(1);
    expect(h.proxier.getServiceInfo(P)?.isStarted()).toBe(true);
  });

  it('keeps the last good state when an update is malformed, and still deletes it', async () => {
    const h = await start();
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    const info = h.proxier.getServiceInfo(P);
    const broken = { metadata: { namespace: 'ns', name: 'a' }, spec: { ports: 'oops' } };
    h.proxier.onServiceUpdate(service('a'), broken as unknown as Service);
    expect(h.proxier.pendingChanges()).toBe(0);
    expect(info?.isAlive()).toBe(true);
    await h.synced(() => h.proxier.onServiceDelete(broken as unknown as Service));
    expect(info?.isFinished()).toBe(true);
  });

  it('never throws out of a handler, whatever it is given', async () => {
    const h = await start();
    const revoked = Proxy.revocable({}, {});
    revoked.revoke();
    const throwing = new Proxy(
      {},
      {
        get() {
          throw new Error('get');
        },
        ownKeys() {
          throw new Error('ownKeys');
        },
      },
    );
    const getter = Object.defineProperty({}, 'metadata', {
      enumerable: true,
      get() {
        throw new Error('metadata');
      },
    });
    const cyclic: Record<string, unknown> = { metadata: { name: 'c', namespace: 'ns' } };
    cyclic.spec = { ports: [cyclic], self: cyclic };
    const garbage: unknown[] = [
      ...[null, undefined, 42, 'x', [], {}, { metadata: null }, Symbol('s'), 10n, () => 1],
      ...[revoked.proxy, throwing, getter, cyclic],
    ];
    const p = h.proxier as unknown as Record<string, (...args: unknown[]) => void>;
    for (const g of garbage) {
      for (const m of [
        'onServiceAdd',
        'onServiceDelete',
        'onEndpointsAdd',
        'onEndpointsDelete',
        'onEndpointSliceAdd',
        'onEndpointSliceDelete',
      ]) {
        expect(() => p[m]?.(g)).not.toThrow();
      }
      for (const m of ['onServiceUpdate', 'onEndpointsUpdate', 'onEndpointSliceUpdate']) {
        expect(() => p[m]?.(g, g === null ? {} : null)).not.toThrow();
        expect(() => p[m]?.(service('a'), g)).not.toThrow();
        expect(() => p[m]?.(g, service('a'))).not.toThrow();
      }
    }
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    expect(h.proxier.getServiceInfo(P)?.isStarted()).toBe(true);
  });

  it('survives a load balancer and a recorder that throw', async () => {
    const lb = new RoundRobinLoadBalancer();
    vi.spyOn(lb, 'onEndpointsAdd').mockImplementation(() => {
      throw new Error('lb bug');
    });
    const recorder = {
      event: vi.fn(() => {
        throw new Error('recorder bug');
      }),
    };
    const h = await start({ loadBalancer: lb, recorder });
    expect(() => h.proxier.onEndpointsAdd(endpoints('a', ['10.1.0.1']))).not.toThrow();
    h.sockets.fail = (_protocol, ip) => ip === '10.0.0.2';
    await h.synced(() => {
      h.proxier.onServiceAdd(service('a'));
      h.proxier.onServiceAdd(service('b', { clusterIP: '10.0.0.2' }));
    });
    expect(recorder.event).toHaveBeenCalledWith(
      expect.objectContaining({ name: 'b' }),
      'Warning',
      'SocketOpenFailed',
      expect.stringContaining('ns/b:p'),
    );
    expect(h.proxier.getServiceInfo(P)?.isStarted()).toBe(true);
  });
});

describe('validation work', () => {
  it('does not check or copy again what a config fan-out delivered, but does a raw object', async () => {
    const lb = new RoundRobinLoadBalancer();
    const add = vi.spyOn(lb, 'onEndpointsAdd');
    const h = await start({ loadBalancer: lb }, false);
    const informer = new StaticInformer<Endpoints>();
    const config = new EndpointsConfig(informer);
    const delivered: Endpoints[] = [];
    config.registerEventHandler(
      new (class extends NoopEndpointsHandler {
        override onEndpointsAdd(e: Endpoints): void {
          delivered.push(e);
        }
      })(),
    );
    config.registerEventHandler(h.proxier);
    informer.add(endpoints('a', ['10.1.0.1']));
    expect(delivered).toHaveLength(1);
    expect(add.mock.calls[0]?.[0]).toBe(delivered[0]);
    const raw = endpoints('b', ['10.1.0.2']);
    h.proxier.onEndpointsAdd(raw);
    expect(add.mock.calls[1]?.[0]).toEqual(raw);
    expect(add.mock.calls[1]?.[0]).not.toBe(raw);
  });
});

describe('rate limiting', () => {
  it('runs a burst of 2 syncs, then at most one per minSyncPeriod, and one per syncPeriod', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance', 'Date'] });
    const h = await start({ minSyncPeriodMs: 1_000, syncPeriodMs: 10_000 }, false);
    const flush = () => vi.advanceTimersByTimeAsync(0);
    h.proxier.onServiceSynced();
    h.proxier.onEndpointsSynced();
    await flush();
    expect(syncMessages).toHaveLength(1); // the initial sync takes the first token
    h.proxier.onServiceAdd(service('a'));
    await flush();
    expect(syncMessages).toHaveLength(2); // the second token of the burst
    h.proxier.onServiceAdd(service('b', { clusterIP: '10.0.0.2' }));
    h.proxier.onServiceAdd(service('c', { clusterIP: '10.0.0.3' }));
    await flush();
    expect(syncMessages).toHaveLength(2); // rate limited, and coalesced
    await vi.advanceTimersByTimeAsync(400);
    expect(syncMessages).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(700);
    expect(syncMessages).toHaveLength(3);
    expect(syncMessages[2]?.changes).toBe(2);
    await vi.advanceTimersByTimeAsync(9_000);
    expect(syncMessages).toHaveLength(3);
    await vi.advanceTimersByTimeAsync(1_100);
    expect(syncMessages).toHaveLength(4); // periodic
    expect(syncMessages[3]?.changes).toBe(0);
    expect(h.sockets.all).toHaveLength(3);
  });
});
