import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type EndpointSlice,
  type Endpoints,
  type Service,
  type SharedInformer,
  StaticInformer,
} from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createGuardedInformer } from './kube-informer.js';
import type { NodeLike } from './node-info.js';
import { PROXY_LABEL_SELECTOR } from './selectors.js';
import {
  createKubernetesSources,
  type KubernetesSources,
  type KubernetesSourcesOptions,
} from './sources.js';
import { FakeApiServer } from './test-support/fake-apiserver.js';
import {
  endpointSlice,
  hasControlChars,
  kubeConfigFor,
  node,
  recordingHandler,
  recordingLogger,
  refuseApiRequests,
  service,
  until,
} from './test-support/helpers.js';

let server: FakeApiServer;
let ac: AbortController;
let running: Promise<void> | undefined;

const FAST = { backoff: { initialMs: 20, maxMs: 100, jitter: 0 } };

beforeEach(async () => {
  server = await FakeApiServer.start();
  ac = new AbortController();
  running = undefined;
  server.store.create('services', service('shop', 'web', '10.96.0.10'));
  server.store.create('services', service('shop', 'headless', 'None'));
  server.store.create(
    'services',
    service('shop', 'mesh', '10.96.0.11', 80, {
      'service.kubernetes.io/service-proxy-name': 'mesh',
    }),
  );
  server.store.create('endpointslices', endpointSlice('shop', 'web', ['10.1.0.1', '10.1.0.2']));
  server.store.create(
    'endpointslices',
    endpointSlice('shop', 'headless', ['10.1.0.3'], 80, 'a', {
      'service.kubernetes.io/headless': '',
    }),
  );
  server.store.create('nodes', node('n1', ['192.0.2.10', 'fd00::10']));
  server.store.create('nodes', node('n2', ['192.0.2.20']));
});

afterEach(async () => {
  ac.abort();
  await running;
  await server.close();
});

async function startSources(
  opts: Partial<KubernetesSourcesOptions> = {},
): Promise<KubernetesSources> {
  const sources = await createKubernetesSources({
    kubeConfig: kubeConfigFor(server.url),
    nodeName: 'N1 ',
    informerOptions: FAST,
    ...opts,
  });
  running = sources.run(ac.signal);
  return sources;
}

async function synced(...informers: (SharedInformer<unknown> | undefined)[]): Promise<void> {
  await until(() => informers.every((i) => i?.hasSynced()), 'sync');
}

describe('createKubernetesSources', () => {
  it('lists Services, EndpointSlices and this Node with kube-proxy selectors', async () => {
    const sources = await startSources();
    expect(sources.endpoints).toBeUndefined();
    const svc = recordingHandler<Service>();
    const eps = recordingHandler<EndpointSlice>();
    sources.services.addEventHandler(svc.handler);
    sources.endpointSlices?.addEventHandler(eps.handler);
    await synced(sources.services, sources.endpointSlices);
    expect([...svc.objects.keys()]).toEqual(['shop/web']);
    expect([...eps.objects.keys()]).toEqual(['shop/web-a']);
    await until(() => sources.nodeIPs().length > 0, 'node');
    expect(sources.nodeIPs()).toEqual(['192.0.2.10', 'fd00::10']);
    expect(sources.nodeEligible()).toBe(true);
    const nodeList = server.requests.find((r) => r.verb === 'list' && r.resource === 'nodes');
    expect(nodeList?.query.get('fieldSelector')).toBe('metadata.name=n1');
  });

  it('follows Node changes for /healthz eligibility and keeps them while the API server is away', async () => {
    const sources = await startSources();
    await until(() => sources.nodeEligible(), 'eligible');
    await until(() => server.openWatches('nodes') === 1, 'node watch');
    server.store.update(
      'nodes',
      node('n1', ['192.0.2.10'], {
        spec: { taints: [{ key: 'ToBeDeletedByClusterAutoscaler', effect: 'NoSchedule' }] },
      }),
    );
    await until(() => !sources.nodeEligible(), 'ineligible');
    server.store.update('nodes', node('n1', ['192.0.2.10']));
    await until(() => sources.nodeEligible(), 'eligible again');
    const svc = recordingHandler<Service>();
    sources.services.addEventHandler(svc.handler);
    const port = Number(new URL(server.url).port);
    await server.close();
    // Wait until the Node and Service informers have each failed twice (a back-off in between).
    const refused = await refuseApiRequests(port);
    try {
      await until(
        () => refused.attempts('nodes') >= 2 && refused.attempts('services') >= 2,
        'two failed requests per informer',
      );
      expect(sources.nodeEligible()).toBe(true);
      expect([...svc.objects.keys()]).toEqual(['shop/web']);
      expect(svc.calls.filter((c) => c[0] === 'delete')).toEqual([]);
    } finally {
      await refused.close();
    }
    server = await FakeApiServer.start();
  });

  it('waits for its Node alone before run, and run then shares that Node watch', async () => {
    const sources = await createKubernetesSources({
      kubeConfig: kubeConfigFor(server.url),
      nodeName: 'n1',
      informerOptions: FAST,
    });
    expect(await sources.waitForNode(ac.signal, 10_000)).toBe(true);
    expect(sources.nodeIPs()).toEqual(['192.0.2.10', 'fd00::10']);
    expect(server.count('list', 'services')).toBe(0); // nothing but the Node so far
    expect(server.count('list', 'endpointslices')).toBe(0);
    expect(await sources.waitForNode(ac.signal, 0)).toBe(true); // known: at once
    running = sources.run(ac.signal);
    await synced(sources.services, sources.endpointSlices);
    await until(() => server.openWatches() === 3, 'three watches');
    expect(server.openWatches('nodes')).toBe(1);
    expect(server.count('list', 'nodes')).toBe(1);
  });

  it('gives up waiting for an unknown Node after the timeout, and says when it appears', async () => {
    const sources = await createKubernetesSources({
      kubeConfig: kubeConfigFor(server.url),
      nodeName: 'n3',
      informerOptions: FAST,
    });
    let changes = 0;
    const remove = sources.onNodeChange(() => changes++);
    const started = Date.now();
    expect(await sources.waitForNode(ac.signal, 200)).toBe(false);
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
    expect(sources.nodeIPs()).toEqual([]);
    await until(() => server.openWatches('nodes') === 1, 'node watch');
    server.store.create('nodes', node('n3', ['192.0.2.30']));
    await until(() => changes === 1, 'the change');
    expect(sources.nodeIPs()).toEqual(['192.0.2.30']);
    remove();
    server.store.update('nodes', node('n3', ['192.0.2.31']));
    await until(() => sources.nodeIPs()[0] === '192.0.2.31', 'the update');
    expect(changes).toBe(1);
    running = sources.run(ac.signal);
  });

  it('stops waiting for the Node when its signal aborts', async () => {
    const sources = await createKubernetesSources({
      kubeConfig: kubeConfigFor(server.url),
      nodeName: 'n9',
      informerOptions: FAST,
    });
    const waiting = sources.waitForNode(ac.signal, 60_000);
    ac.abort();
    expect(await waiting).toBe(false);
    expect(await sources.waitForNode(ac.signal, 60_000)).toBe(false);
  });

  it('uses legacy Endpoints when asked', async () => {
    server.store.create('endpoints', {
      metadata: { name: 'web', namespace: 'shop' },
      subsets: [
        { addresses: [{ ip: '10.1.0.1' }], ports: [{ name: 'http', port: 8080, protocol: 'TCP' }] },
      ],
    });
    const sources = await startSources({ useEndpointSlices: false });
    expect(sources.endpointSlices).toBeUndefined();
    const eps = recordingHandler<Endpoints>();
    sources.endpoints?.addEventHandler(eps.handler);
    await synced(sources.services, sources.endpoints);
    expect([...eps.objects.keys()]).toEqual(['shop/web']);
    expect(server.count('list', 'endpointslices')).toBe(0);
  });

  it('uses the informers an integrator already runs: one list and one watch, filtered on the client', async () => {
    const kc = kubeConfigFor(server.url);
    // The integrator watches every Service (no selectors) for their own purposes.
    const mine = createGuardedInformer<Service>(kc, { path: '/api/v1/services', kind: 'Service' });
    await mine.start();
    const sources = await startSources({ informers: { services: mine } });
    const svc = recordingHandler<Service>();
    sources.services.addEventHandler(svc.handler);
    await synced(sources.services, sources.endpointSlices);
    expect([...svc.objects.keys()]).toEqual(['shop/web']);
    await until(() => server.openWatches('services') === 1, 'watch');
    server.store.create('services', service('shop', 'api', '10.96.0.12'));
    await until(() => svc.objects.has('shop/api'), 'new service');
    expect(server.count('list', 'services')).toBe(1);
    expect(server.count('watch', 'services')).toBe(1);
    ac.abort();
    await running;
    // The integrator's informer is theirs to stop.
    expect(server.openWatches('services')).toBe(1);
    await mine.stop();
  });

  it("takes core-style informers too, held to kube-proxy's selectors", async () => {
    const mine = new StaticInformer<Service>();
    mine.add(service('shop', 'web', '10.96.0.10') as unknown as Service);
    mine.add(service('shop', 'headless', 'None') as unknown as Service);
    mine.markSynced();
    const sources = await startSources({ informers: { services: mine } });
    const svc = recordingHandler<Service>();
    sources.services.addEventHandler(svc.handler);
    await synced(sources.services);
    expect([...svc.objects.keys()]).toEqual(['shop/web']);
    mine.update(
      service('shop', 'web', '10.96.0.10', 80, {
        'service.kubernetes.io/service-proxy-name': 'x',
      }) as unknown as Service,
    );
    await until(() => svc.objects.size === 0, 'filtered out');
    mine.update(service('shop', 'headless', '10.96.0.20') as unknown as Service);
    await until(() => svc.objects.has('shop/headless'), 'now proxied');
    expect(server.count('list', 'services')).toBe(0);
  });

  it('logs Events, escaped and cut, when every informer is provided and no client is configured', async () => {
    const { logger, lines } = recordingLogger();
    const sources = await createKubernetesSources({
      nodeName: 'n1',
      logger,
      env: {}, // not in a Pod, no kubeconfig: no client
      serviceAccountDir: join(tmpdir(), 'no-such-service-account'),
      informers: {
        services: new StaticInformer<Service>(),
        endpointSlices: new StaticInformer<EndpointSlice>(),
        node: new StaticInformer<NodeLike>(),
      },
    });
    sources.recorder.event(
      { kind: 'Service', namespace: 'shop', name: 'web\x1b[2J' },
      'Warning',
      'Invalid',
      `bad port\r\nFAKE LINE ${'m'.repeat(5000)}`,
    );
    const line = lines.info.find((l) => l.startsWith('Event(Service shop/web'));
    expect(line).toBeDefined();
    expect(line).toContain('web\\x1b[2J');
    expect(line).toContain('bad port\\r\\nFAKE LINE');
    expect(hasControlChars(line)).toBe(false);
    expect(line).toMatch(/m…\(\d+ more\)$/);
    expect((line as string).length).toBeLessThan(1100);
  });

  it('rejects an empty or malformed node name', async () => {
    const kubeConfig = kubeConfigFor(server.url);
    await expect(createKubernetesSources({ kubeConfig, nodeName: '  ' })).rejects.toThrow(
      /empty node name/,
    );
    await expect(
      createKubernetesSources({ kubeConfig, nodeName: 'n1,metadata.name=n2' }),
    ).rejects.toThrow(/not a valid Node name/);
    await expect(
      createKubernetesSources({ kubeConfig, nodeName: undefined as unknown as string }),
    ).rejects.toThrow(/empty node name/);
  });

  it('runs in a cluster from the service-account files, over TLS with a bearer token', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sa-'));
    const tls = (f: string) => readFileSync(new URL(`./test-support/tls/${f}`, import.meta.url));
    const secure = await FakeApiServer.start({
      tls: { key: tls('server.key'), cert: tls('server.crt') },
      token: 'sa',
    });
    try {
      writeFileSync(join(dir, 'token'), 'sa');
      writeFileSync(join(dir, 'ca.crt'), tls('ca.crt'));
      secure.store.create('services', service('shop', 'web', '10.96.0.10'));
      secure.store.create('nodes', node('n1', ['192.0.2.10']));
      const sources = await createKubernetesSources({
        nodeName: 'n1',
        serviceAccountDir: dir,
        env: {
          KUBERNETES_SERVICE_HOST: '127.0.0.1',
          KUBERNETES_SERVICE_PORT: new URL(secure.url).port,
        },
        informerOptions: FAST,
      });
      running = sources.run(ac.signal);
      await synced(sources.services, sources.endpointSlices);
      await until(() => secure.openWatches() === 3, 'watches');
      sources.recorder.event(
        { kind: 'Node', name: 'n1', uid: 'n1' },
        'Normal',
        'Starting',
        'Starting userspace-proxy.',
      );
      await until(() => secure.count('create', 'events') === 1, 'event');
      expect(secure.requests.every((r) => r.authorization === 'Bearer sa')).toBe(true);
      expect(
        secure.requests
          .find((r) => r.verb === 'list' && r.resource === 'endpointslices')
          ?.query.get('labelSelector'),
      ).toBe(PROXY_LABEL_SELECTOR);
      ac.abort();
      await running;
    } finally {
      await secure.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
