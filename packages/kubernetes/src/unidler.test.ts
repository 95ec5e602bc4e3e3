import { getEventListeners } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Service, ServicePortName } from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FakeApiServer } from './test-support/fake-apiserver.js';
import type { StoredObject } from './test-support/fake-store.js';
import { kubeConfigFor, recordingLogger, service } from './test-support/helpers.js';
import { hang } from './test-support/hostile-responses.js';
import type { Timers } from './timers.js';
import { IDLED_AT_ANNOTATION, UNIDLE_TARGETS_ANNOTATION } from './unidle-targets.js';
import { KubernetesUnidler } from './unidler.js';
import type { KubernetesUnidlerOptions } from './unidler-options.js';

const IDLED_AT = '2026-12-01T08:00:00Z';

/** The idler's hook, as its brief gives it: KubernetesUnidler must fit it structurally. */
interface UnidleHook {
  needPods(request: { service: Service; servicePort: ServicePortName; signal?: AbortSignal }): void;
}

function workload(resource: string, name: string, replicas: number): StoredObject {
  const kind = {
    deployments: 'Deployment',
    statefulsets: 'StatefulSet',
    replicasets: 'ReplicaSet',
  }[resource];
  return {
    apiVersion: 'apps/v1',
    kind: kind as string,
    metadata: { name, namespace: 'ns' },
    spec: { replicas, selector: { matchLabels: { app: name } } },
  };
}

function idledService(targets: unknown, name = 'web'): Service {
  const svc = service('ns', name, '10.96.0.10') as unknown as Service;
  svc.metadata.annotations = {
    [IDLED_AT_ANNOTATION]: IDLED_AT,
    [UNIDLE_TARGETS_ANNOTATION]: typeof targets === 'string' ? targets : JSON.stringify(targets),
  };
  return svc;
}

const port = (name = 'web') => ({ namespace: 'ns', name, port: 'http' });

/** Real timers for the HTTP, a clock the test moves for the rate limit. */
function manualClock() {
  const clock = { now: 1_000_000 };
  const timers: Timers = {
    now: () => clock.now,
    setTimeout: (fn, ms) => setTimeout(fn, ms),
    clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
  };
  return { clock, timers };
}

const replicasOf = (server: FakeApiServer, resource: string, name: string) =>
  (server.store.get(resource, 'ns', name)?.spec as { replicas?: number } | undefined)?.replicas;

const calls = (server: FakeApiServer) =>
  server.requests.map((r) => `${r.verb} ${r.group}/${r.resource} ${r.name ?? ''}`.trim());

describe('KubernetesUnidler against the fake API server', () => {
  let server: FakeApiServer;
  let unidler: KubernetesUnidler | undefined;

  beforeEach(async () => {
    server = await FakeApiServer.start();
  });
  afterEach(async () => {
    await unidler?.close();
    unidler = undefined;
    await server.close();
  });

  const make = (opts: KubernetesUnidlerOptions = {}) => {
    unidler = new KubernetesUnidler(kubeConfigFor(server.url), {
      backoff: { initialMs: 1, maxMs: 5, jitter: 0 },
      ...opts,
    });
    return unidler;
  };

  it('is an UnidleHook of the idler', () => {
    const hook: UnidleHook = make();
    expect(typeof hook.needPods).toBe('function');
  });

  it("reads each target's scale and writes back the annotation's replicas", async () => {
    server.store.create('deployments', workload('deployments', 'web', 0));
    server.store.create('statefulsets', workload('statefulsets', 'db', 0));
    server.store.create('replicasets', workload('replicasets', 'rs', 0));
    const { logger, lines } = recordingLogger();
    const u = make({ logger });
    u.needPods({
      service: idledService([
        { kind: 'Deployment', name: 'web', group: 'apps', replicas: 3 },
        { kind: 'StatefulSet', name: 'db', group: 'apps', replicas: 2 },
        { kind: 'ReplicaSet', name: 'rs', group: 'apps', replicas: 4 },
      ]),
      servicePort: port(),
    });
    await u.settled();
    expect(replicasOf(server, 'deployments', 'web')).toBe(3);
    expect(replicasOf(server, 'statefulsets', 'db')).toBe(2);
    expect(replicasOf(server, 'replicasets', 'rs')).toBe(4);
    expect(calls(server).sort()).toEqual([
      'get apps/deployments/scale web',
      'get apps/replicasets/scale rs',
      'get apps/statefulsets/scale db',
      'update apps/deployments/scale web',
      'update apps/replicasets/scale rs',
      'update apps/statefulsets/scale db',
    ]);
    expect(u.stats).toMatchObject({ requests: 1, scaled: 3, failed: 0, retries: 0 });
    expect(lines.info).toContain(
      'scaled Deployment ns/web from 0 to 3 replica(s): Service port ns/web:http needs pods',
    );
    // Without clearAnnotations the Service is never written.
    expect(server.count('patch', 'services')).toBe(0);
  });

  it('leaves a target that already has replicas alone (never scales down)', async () => {
    server.store.create('deployments', workload('deployments', 'web', 2));
    const u = make();
    u.needPods({
      service: idledService([{ kind: 'Deployment', name: 'web', replicas: 5 }]),
      servicePort: port(),
    });
    await u.settled();
    expect(replicasOf(server, 'deployments', 'web')).toBe(2);
    expect(calls(server)).toEqual(['get apps/deployments/scale web']);
    expect(u.stats).toMatchObject({ alreadyScaled: 1, scaled: 0 });
  });

  it('keeps at most one request in flight per target; repeats join it', async () => {
    server.store.create('deployments', workload('deployments', 'web', 0));
    server.store.create('deployments', workload('deployments', 'api', 0));
    const u = make();
    const svc = idledService([
      { kind: 'Deployment', name: 'web', replicas: 2 },
      { kind: 'Deployment', name: 'api', replicas: 1 },
    ]);
    for (let i = 0; i < 10; i++) u.needPods({ service: svc, servicePort: port() });
    // Another Service naming the same Deployment joins the same request.
    u.needPods({
      service: idledService([{ kind: 'Deployment', name: 'web', replicas: 2 }], 'web2'),
      servicePort: port('web2'),
    });
    expect(u.inFlight).toBe(2);
    await u.settled();
    expect(u.inFlight).toBe(0);
    expect(server.count('get', 'deployments/scale')).toBe(2);
    expect(server.count('update', 'deployments/scale')).toBe(2);
    expect(u.stats).toMatchObject({ requests: 11, coalesced: 19, scaled: 2, rateLimited: 0 });
  });

  it('limits requests per target with a token bucket (burst 2, then one per 10 s)', async () => {
    server.store.create('deployments', workload('deployments', 'web', 0));
    const { clock, timers } = manualClock();
    const u = make({ timers });
    const ask = async () => {
      u.needPods({
        service: idledService([{ kind: 'Deployment', name: 'web', replicas: 2 }]),
        servicePort: port(),
      });
      await u.settled();
    };
    await ask(); // scales up
    await ask(); // the second token: reads, finds it up
    await ask(); // held back
    await ask(); // held back
    expect(server.count('get', 'deployments/scale')).toBe(2);
    expect(u.stats).toMatchObject({ scaled: 1, alreadyScaled: 1, rateLimited: 2 });
    clock.now += 9_999;
    await ask();
    expect(server.count('get', 'deployments/scale')).toBe(2);
    clock.now += 1;
    await ask();
    expect(server.count('get', 'deployments/scale')).toBe(3);
    expect(u.stats.rateLimited).toBe(3);
    // The limit is per target: another Deployment has its own bucket.
    server.store.create('deployments', workload('deployments', 'api', 0));
    u.needPods({
      service: idledService([{ kind: 'Deployment', name: 'api', replicas: 1 }], 'api'),
      servicePort: port('api'),
    });
    await u.settled();
    expect(replicasOf(server, 'deployments', 'api')).toBe(1);
  });

  it('counts and logs a bad annotation once (truncated and escaped), and never throws', async () => {
    const { logger, lines } = recordingLogger();
    const u = make({ logger });
    const bad = `{not json\n${'x'.repeat(5000)}`;
    for (let i = 0; i < 5; i++) {
      expect(() => u.needPods({ service: idledService(bad), servicePort: port() })).not.toThrow();
    }
    await u.settled();
    expect(u.stats.invalidAnnotations).toBe(1);
    expect(lines.warn).toHaveLength(1);
    const [line] = lines.warn as [string];
    expect(line).toContain(UNIDLE_TARGETS_ANNOTATION);
    expect(line).toContain('ns/web');
    expect(line).not.toContain('\n');
    expect(line.length).toBeLessThan(400);
    // A different bad value is reported again; a Service without the annotation is not an error.
    u.needPods({
      service: idledService([{ kind: 'Pod', name: 'p', replicas: 1 }]),
      servicePort: port(),
    });
    const plain = service('ns', 'plain', '10.96.0.11') as unknown as Service;
    u.needPods({ service: plain, servicePort: port('plain') });
    u.needPods({ service: { metadata: {} } as unknown as Service, servicePort: port('x') });
    u.needPods(undefined as never);
    await u.settled();
    expect(u.stats.invalidAnnotations).toBe(2);
    expect(lines.warn).toHaveLength(2);
    expect(server.requests).toEqual([]);
  });

  it('retries unreachable, busy or conflicting writes with back-off, a bounded number of times', async () => {
    server.store.create('deployments', workload('deployments', 'web', 0));
    server.store.create('statefulsets', workload('statefulsets', 'db', 0));
    server.failNext({ verb: 'get', resource: 'deployments/scale' }, 503, 2);
    server.failNext({ verb: 'update', resource: 'statefulsets/scale' }, 409, 1);
    const u = make();
    u.needPods({
      service: idledService([
        { kind: 'Deployment', name: 'web', replicas: 3 },
        { kind: 'StatefulSet', name: 'db', replicas: 1 },
      ]),
      servicePort: port(),
    });
    await u.settled();
    expect(replicasOf(server, 'deployments', 'web')).toBe(3);
    expect(replicasOf(server, 'statefulsets', 'db')).toBe(1);
    expect(server.count('get', 'deployments/scale')).toBe(3);
    expect(server.count('get', 'statefulsets/scale')).toBe(2); // read again after the conflict
    expect(u.stats).toMatchObject({ scaled: 2, retries: 3, failed: 0 });
  });

  it('gives up after maxAttempts, and at once when the server refuses (403)', async () => {
    server.store.create('deployments', workload('deployments', 'web', 0));
    server.store.create('deployments', workload('deployments', 'api', 0));
    server.failNext({ verb: 'get', resource: 'deployments/scale' }, 500, 100);
    const { logger, lines } = recordingLogger();
    const u = make({ maxAttempts: 3, logger });
    u.needPods({
      service: idledService([{ kind: 'Deployment', name: 'web', replicas: 3 }]),
      servicePort: port(),
    });
    await u.settled();
    expect(server.count('get', 'deployments/scale')).toBe(3);
    expect(u.stats).toMatchObject({ failed: 1, retries: 2, scaled: 0 });
    expect(lines.warn.at(-1)).toMatch(/^scaling Deployment ns\/web: giving up after 3 attempt/);
    // 403: not retried.
    const forbidding = await FakeApiServer.start();
    try {
      forbidding.store.create('deployments', workload('deployments', 'api', 0));
      forbidding.failNext({ verb: 'update', resource: 'deployments/scale' }, 403, 100);
      const v = new KubernetesUnidler(kubeConfigFor(forbidding.url), { logger });
      v.needPods({
        service: idledService([{ kind: 'Deployment', name: 'api', replicas: 1 }]),
        servicePort: port(),
      });
      await v.settled();
      expect(forbidding.count('update', 'deployments/scale')).toBe(1);
      expect(v.stats).toMatchObject({ failed: 1, retries: 0 });
      expect(lines.warn.at(-1)).toMatch(/HTTP 403\); not retrying/);
    } finally {
      await forbidding.close();
    }
  });

  it('skips a target that does not exist', async () => {
    server.store.create('deployments', workload('deployments', 'web', 0));
    const u = make();
    u.needPods({
      service: idledService([
        { kind: 'Deployment', name: 'gone', replicas: 3 },
        { kind: 'Deployment', name: 'web', replicas: 1 },
      ]),
      servicePort: port(),
    });
    await u.settled();
    expect(u.stats).toMatchObject({ notFound: 1, scaled: 1, failed: 0, retries: 0 });
  });

  it("stops retrying when the request's signal aborts, and everything on close()", async () => {
    server.store.create('deployments', workload('deployments', 'web', 0));
    server.store.create('deployments', workload('deployments', 'api', 0));
    server.failNext({ verb: 'get', resource: 'deployments/scale' }, 503, 1000);
    const u = make({ backoff: { initialMs: 60_000, jitter: 0 } });
    const ac = new AbortController();
    const svc = idledService([{ kind: 'Deployment', name: 'web', replicas: 3 }]);
    u.needPods({ service: svc, servicePort: port(), signal: ac.signal });
    // A second requester with its own signal keeps the shared request alive until it aborts too.
    const other = new AbortController();
    u.needPods({ service: svc, servicePort: port(), signal: other.signal });
    await vi.waitFor(() => expect(server.count('get', 'deployments/scale')).toBe(1), {
      timeout: 10_000,
    });
    ac.abort();
    await new Promise((r) => setTimeout(r, 20));
    expect(u.inFlight).toBe(1);
    other.abort();
    await u.settled();
    expect(u.inFlight).toBe(0);
    expect(server.count('get', 'deployments/scale')).toBe(1);
    expect(u.stats).toMatchObject({ failed: 0, scaled: 0 });
    // A request without a signal runs until close().
    u.needPods({
      service: idledService([{ kind: 'Deployment', name: 'api', replicas: 3 }], 'api'),
      servicePort: port('api'),
    });
    await vi.waitFor(() => expect(server.count('get', 'deployments/scale')).toBe(2), {
      timeout: 10_000,
    });
    await u.close();
    expect(u.inFlight).toBe(0);
    u.needPods({ service: svc, servicePort: port() }); // ignored after close
    expect(u.inFlight).toBe(0);
    expect(u.stats.failed).toBe(0);
  });

  it('aborts an HTTP request in flight on close() (the signal reaches client-node)', async () => {
    const arrived: http.IncomingMessage[] = [];
    const silent = http.createServer((req) => arrived.push(req)); // never answers
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const { port: p } = silent.address() as AddressInfo;
      const u = new KubernetesUnidler(kubeConfigFor(`http://127.0.0.1:${p}`));
      u.needPods({
        service: idledService([{ kind: 'Deployment', name: 'web', replicas: 3 }]),
        servicePort: port(),
      });
      await vi.waitFor(() => expect(arrived).toHaveLength(1), { timeout: 10_000 });
      await u.close(); // would hang forever if the fetch were not aborted
      expect(u.inFlight).toBe(0);
      expect(u.stats).toMatchObject({ failed: 0, retries: 0 });
      await vi.waitFor(() => expect(arrived[0]?.destroyed).toBe(true), { timeout: 10_000 });
    } finally {
      silent.closeAllConnections();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('the signal option stops everything, as close() does', async () => {
    const ac = new AbortController();
    ac.abort();
    server.store.create('deployments', workload('deployments', 'web', 0));
    const u = make({ signal: ac.signal });
    u.needPods({
      service: idledService([{ kind: 'Deployment', name: 'web', replicas: 3 }]),
      servicePort: port(),
    });
    await u.settled();
    expect(server.requests).toEqual([]);
  });

  describe('clearAnnotations', () => {
    it('removes unidle-targets and idled-at once every target is up', async () => {
      server.store.create('deployments', workload('deployments', 'web', 0));
      const svc = idledService([
        { kind: 'Deployment', name: 'web', replicas: 3 },
        { kind: 'Deployment', name: 'gone', replicas: 1 },
      ]);
      svc.metadata.annotations = { ...svc.metadata.annotations, other: 'kept' };
      server.store.create('services', svc as unknown as StoredObject);
      const u = make({ clearAnnotations: true });
      u.needPods({ service: svc, servicePort: port() });
      await u.settled();
      expect(server.store.get('services', 'ns', 'web')?.metadata.annotations).toEqual({
        other: 'kept',
      });
      expect(u.stats).toMatchObject({ scaled: 1, notFound: 1, annotationsCleared: 1 });
    });

    it('keeps the targets it could not handle, and leaves a changed annotation alone', async () => {
      server.store.create('deployments', workload('deployments', 'web', 0));
      server.store.create('deployments', workload('deployments', 'api', 0));
      server.failNext({ verb: 'update', resource: 'deployments/scale' }, 403, 1);
      const entries = [
        { kind: 'Deployment', name: 'api', replicas: 2 },
        { kind: 'DeploymentConfig', name: 'dc', group: 'apps.openshift.io', replicas: 1 },
        { kind: 'Deployment', name: 'web', replicas: 3 },
      ];
      const svc = idledService(entries);
      server.store.create('services', svc as unknown as StoredObject);
      const u = make({ clearAnnotations: true, maxAttempts: 1 });
      u.needPods({ service: svc, servicePort: port() });
      await u.settled();
      const scaledOne = replicasOf(server, 'deployments', 'web') === 3 ? 'web' : 'api';
      const left = entries.filter((e) => e.name !== scaledOne);
      const annotations = server.store.get('services', 'ns', 'web')?.metadata.annotations;
      expect(annotations).toEqual({
        [IDLED_AT_ANNOTATION]: IDLED_AT,
        [UNIDLE_TARGETS_ANNOTATION]: JSON.stringify(left),
      });
      expect(u.stats).toMatchObject({ scaled: 1, failed: 1, annotationsCleared: 1 });
      // The proxy's copy is now stale: the patch's test fails (422), quietly, and nothing changes.
      const { logger, lines } = recordingLogger();
      const v = make({ clearAnnotations: true, logger });
      server.store.update('deployments', workload('deployments', scaledOne, 0));
      v.needPods({ service: svc, servicePort: port() });
      await v.settled();
      expect(server.store.get('services', 'ns', 'web')?.metadata.annotations).toEqual(annotations);
      expect(v.stats.annotationsCleared).toBe(0);
      expect(lines.warn.filter((l) => l.includes('clearing'))).toEqual([]);
      expect(lines.debug.some((l) => l.includes('clearing') && l.includes('HTTP 422'))).toBe(true);
      await u.close();
    });
  });
  describe('a scale request that never answers', () => {
    it('times out, frees the target for the next request, and counts it', async () => {
      server.store.create('deployments', workload('deployments', 'web', 0));
      const held = hang(server, (r) => r.verb === 'get' && r.resource === 'deployments/scale');
      const { logger, lines } = recordingLogger();
      const u = make({ requestTimeoutMs: 150, maxAttempts: 2, logger });
      const svc = idledService([{ kind: 'Deployment', name: 'web', group: 'apps', replicas: 2 }]);
      u.needPods({ service: svc, servicePort: port() });
      // Both attempts hang; each gives up at its bound, so the request ends instead of for ever.
      await u.settled();
      expect(held.length).toBe(2);
      expect(u.inFlight).toBe(0);
      expect(u.stats).toMatchObject({ timeouts: 2, failed: 1, scaled: 0 });
      expect(lines.warn.some((l) => l.includes('no answer within 150 ms'))).toBe(true);
      // The server answers again: the next ask (the burst allows it) scales the workload.
      server.intercept = undefined;
      u.needPods({ service: svc, servicePort: port() });
      await u.settled();
      expect(replicasOf(server, 'deployments', 'web')).toBe(2);
      expect(u.stats.scaled).toBe(1);
    });

    it('adds one abort listener per joined signal however often the same caller asks', async () => {
      server.store.create('deployments', workload('deployments', 'web', 0));
      const held = hang(server, (r) => r.verb === 'get' && r.resource === 'deployments/scale');
      const u = make({ requestTimeoutMs: 60_000, maxAttempts: 1 });
      const svc = idledService([{ kind: 'Deployment', name: 'web', group: 'apps', replicas: 2 }]);
      const caller = new AbortController();
      for (let i = 0; i < 200; i++) {
        u.needPods({ service: svc, servicePort: port(), signal: caller.signal });
      }
      await vi.waitFor(() => expect(held.length).toBe(1), { timeout: 10_000 });
      expect(u.stats.coalesced).toBe(199);
      expect(getEventListeners(caller.signal, 'abort').length).toBe(1);
      // The only joiner gives up: the request is aborted and its listener removed.
      caller.abort();
      await u.settled();
      expect(u.inFlight).toBe(0);
      expect(getEventListeners(caller.signal, 'abort').length).toBe(0);
    });
  });
});
