import net from 'node:net';
import {
  type Addr,
  type EndpointSlice,
  EndpointSliceConfig,
  type LoadBalancer,
  newCustomProxier,
  newProxier,
  type Proxier,
  type ProxySocket,
  type ProxySocketFactory,
  RoundRobinLoadBalancer,
  type Service,
  ServiceConfig,
} from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createKubernetesSources, type KubernetesSources } from './sources.js';
import { FakeApiServer } from './test-support/fake-apiserver.js';
import {
  endpointSlice,
  kubeConfigFor,
  node,
  recordingHandler,
  refuseApiRequests,
  service,
  until,
} from './test-support/helpers.js';

/** Sockets that bind nothing: which are open is what the Proxier decided. */
class RecordedSockets {
  readonly open = new Map<string, ProxySocket>();
  readonly make: ProxySocketFactory = async ({ protocol, ip, port }) => {
    const key = `${protocol} ${ip ?? '*'}:${port}`;
    let end: () => void = () => undefined;
    const socket: ProxySocket = {
      addr: (): Addr => ({ address: ip ?? '0.0.0.0', port }),
      listenPort: () => port,
      proxyLoop: () => new Promise<void>((resolve) => (end = resolve)),
      close: async () => {
        this.open.delete(key);
        end();
      },
    };
    this.open.set(key, socket);
    return socket;
  };
  keys(): string[] {
    return [...this.open.keys()].sort();
  }
}

let server: FakeApiServer;
let ac: AbortController;
let tasks: Promise<unknown>[];
let proxier: Proxier | undefined;

beforeEach(async () => {
  server = await FakeApiServer.start();
  ac = new AbortController();
  tasks = [];
  proxier = undefined;
});

afterEach(async () => {
  ac.abort();
  await Promise.allSettled(tasks);
  await proxier?.shutdown();
  await server.close();
});

async function wire(): Promise<{
  sockets: RecordedSockets;
  lb: LoadBalancer;
  sources: KubernetesSources;
}> {
  const sources = await createKubernetesSources({
    kubeConfig: kubeConfigFor(server.url),
    nodeName: 'n1',
    informerOptions: { backoff: { initialMs: 20, maxMs: 100, jitter: 0 } },
  });
  const sockets = new RecordedSockets();
  const lb = new RoundRobinLoadBalancer();
  proxier = await newCustomProxier(
    {
      mode: 'service-port-portal',
      loadBalancer: lb,
      minSyncPeriodMs: 0,
      syncPeriodMs: 60_000,
      recorder: sources.recorder,
    },
    sockets.make,
  );
  const serviceConfig = new ServiceConfig(sources.services);
  const sliceConfig = new EndpointSliceConfig(
    sources.endpointSlices as NonNullable<KubernetesSources['endpointSlices']>,
  );
  serviceConfig.registerEventHandler(proxier);
  sliceConfig.registerEventHandler(proxier);
  tasks.push(
    sources.run(ac.signal),
    serviceConfig.run(ac.signal),
    sliceConfig.run(ac.signal),
    proxier.syncLoop(ac.signal),
  );
  return { sockets, lb, sources };
}

const web = { namespace: 'shop', name: 'web', port: 'http' };

describe('Kubernetes sources feeding the Proxier', () => {
  it('carries the initial sync, then add, update and delete from the API server to the listeners', async () => {
    server.store.create('services', service('shop', 'web', '127.1.0.10', 18080));
    server.store.create('endpointslices', endpointSlice('shop', 'web', ['127.0.0.1'], 9000));
    server.store.create('nodes', node('n1', ['192.0.2.10']));
    const { sockets, lb } = await wire();

    await until(() => proxier?.isInitialized() === true, 'initial sync');
    await until(() => sockets.keys().includes('TCP 127.1.0.10:18080'), 'listener');
    await until(() => lb.serviceHasEndpoints(web), 'endpoints');
    expect(lb.nextEndpoint(web, null, false)).toBe('127.0.0.1:9000');

    server.store.create('services', service('shop', 'api', '127.1.0.11', 18081));
    await until(() => sockets.keys().includes('TCP 127.1.0.11:18081'), 'added Service');

    server.store.update('services', service('shop', 'web', '127.1.0.10', 18082));
    await until(
      () =>
        sockets.keys().includes('TCP 127.1.0.10:18082') &&
        !sockets.keys().includes('TCP 127.1.0.10:18080'),
      'updated port',
    );

    server.store.update('endpointslices', endpointSlice('shop', 'web', ['127.0.0.2'], 9001));
    await until(() => lb.nextEndpoint(web, null, false) === '127.0.0.2:9001', 'new endpoint');

    server.store.delete('services', 'shop', 'api');
    await until(() => !sockets.keys().includes('TCP 127.1.0.11:18081'), 'deleted Service');
    expect(sockets.keys()).toEqual(['TCP 127.1.0.10:18082']);
  });

  it('keeps serving what it knows while the API server is down, and catches up after a relist', async () => {
    server.store.create('services', service('shop', 'web', '127.1.0.10', 18080));
    server.store.create('services', service('shop', 'old', '127.1.0.12', 18083));
    server.store.create('endpointslices', endpointSlice('shop', 'web', ['127.0.0.1'], 9000));
    const { sockets, sources } = await wire();
    await until(() => sockets.keys().length === 2, 'listeners');
    await until(() => server.openWatches() === 3, 'watches');
    // The Proxier changes listeners only on informer events: count them through the outage.
    const services = recordingHandler<Service>();
    const slices = recordingHandler<EndpointSlice>();
    sources.services.addEventHandler(services.handler);
    sources.endpointSlices?.addEventHandler(slices.handler);
    const events = () => services.calls.length + slices.calls.length;
    await until(() => events() === 3, 'the replay of what the informers hold');
    const port = Number(new URL(server.url).port);
    await server.close();
    const refused = await refuseApiRequests(port);
    try {
      // Both informers have failed twice (a back-off in between) and delivered nothing.
      await until(
        () => refused.attempts('services') >= 2 && refused.attempts('endpointslices') >= 2,
        'two failed requests per informer',
      );
      expect(events()).toBe(3);
      expect(sockets.keys()).toEqual(['TCP 127.1.0.10:18080', 'TCP 127.1.0.12:18083']);
    } finally {
      await refused.close();
    }

    // The API server comes back with its history compacted and one Service gone: a relist.
    const store = server.store;
    store.delete('services', 'shop', 'old');
    store.compact();
    server = await FakeApiServer.startOn(port, store);
    await until(() => !sockets.keys().includes('TCP 127.1.0.12:18083'), 'reconciled', 15_000);
    expect(sockets.keys()).toEqual(['TCP 127.1.0.10:18080']);
  });

  it('proxies real TCP traffic to the endpoints the API server names, following changes', async () => {
    const backends: net.Server[] = [];
    const backend = async (tag: string) => {
      const srv = net.createServer((sock) => sock.end(tag));
      await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
      backends.push(srv);
      return (srv.address() as net.AddressInfo).port;
    };
    const ask = (ip: string, port: number) =>
      new Promise<string>((resolve) => {
        const sock = net.connect(port, ip);
        let data = '';
        sock.on('data', (d) => {
          data += d;
        });
        sock.on('end', () => resolve(data));
        sock.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
      });
    try {
      const one = await backend('one');
      const two = await backend('two');
      // A random Service address: a fixed one was shared by every run on the machine at once.
      const ip = `127.${2 + Math.floor(Math.random() * 97)}.${Math.floor(Math.random() * 256)}.10`;
      server.store.create('services', service('shop', 'web', ip, 18180));
      server.store.create('endpointslices', endpointSlice('shop', 'web', ['127.0.0.1'], one));
      const sources = await createKubernetesSources({
        kubeConfig: kubeConfigFor(server.url),
        nodeName: 'n1',
      });
      proxier = await newProxier({
        mode: 'service-port-portal',
        minSyncPeriodMs: 0,
        recorder: sources.recorder,
      });
      const serviceConfig = new ServiceConfig(sources.services);
      const sliceConfig = new EndpointSliceConfig(
        sources.endpointSlices as NonNullable<KubernetesSources['endpointSlices']>,
      );
      serviceConfig.registerEventHandler(proxier);
      sliceConfig.registerEventHandler(proxier);
      tasks.push(
        sources.run(ac.signal),
        serviceConfig.run(ac.signal),
        sliceConfig.run(ac.signal),
        proxier.syncLoop(ac.signal),
      );

      const answers: string[] = [];
      const expectAnswer = async (want: string) => {
        const deadline = Date.now() + 10_000;
        let got = '';
        while (got !== want && Date.now() < deadline) {
          got = await ask(ip, 18180);
          answers.push(got);
          if (got !== want) await new Promise((resolve) => setTimeout(resolve, 20));
        }
        expect(got, answers.join(',')).toBe(want);
      };
      await expectAnswer('one');
      server.store.update('endpointslices', endpointSlice('shop', 'web', ['127.0.0.1'], two));
      await expectAnswer('two');
      server.store.delete('services', 'shop', 'web');
      await expectAnswer('ECONNREFUSED');
    } finally {
      for (const b of backends) b.close();
    }
  });
});
