import diagnosticsChannel from 'node:diagnostics_channel';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type EndpointSlice,
  type EventRecorder,
  noopLogger,
  type Proxier,
  type Service,
  StaticInformer,
} from '@userspace-proxy/core';
import { CHANNELS } from '@userspace-proxy/core/diagnostics';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defaultConfiguration, type KubeProxyConfiguration } from './config-schema.js';
import { Daemon } from './daemon.js';
import { parseManifest } from './manifest-parse.js';
import { createSources } from './source-select.js';
import type { KubernetesSourcesOptions } from './sources.js';
import { ask, type Backends, Client, startBackends } from './test-support/backends.js';
import { loopbackBlock } from './test-support/loopback.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { parseExposition, sampleValue } from './test-support/prom-text.js';
import { until } from './test-support/wait.js';

// Loopback addresses of this file: the Service, its two endpoints, and the daemon's servers.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const SERVICE_IP = `${NET}1`;
const A = `${NET}2`;
const B = `${NET}3`;
const SERVERS_IP = `${NET}4`;

let dir: string;
let manifest: string;
let backends: Backends;
let daemon: Daemon | undefined;
const cleanups: (() => unknown)[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-daemon-'));
  manifest = join(dir, 'services.yaml');
  backends = await startBackends({ A, B });
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
  if (daemon) {
    void daemon.stop('test over', { drain: false });
    await daemon.exited;
  }
  daemon = undefined;
  await backends.close();
  await rm(dir, { recursive: true, force: true });
});

const serviceOn = (...ips: string[]) =>
  serviceWithSlice({
    clusterIP: SERVICE_IP,
    port: 8080,
    portName: 'tcp',
    endpoints: ips.map((ip) => ({ ip, port: backends.port })),
  });

function config(mutate: (c: KubeProxyConfiguration) => void = () => {}): KubeProxyConfiguration {
  const c = defaultConfiguration();
  c.userspaceProxy.servicesFile = manifest;
  c.healthzBindAddress = `${SERVERS_IP}:10256`;
  c.metricsBindAddress = `${SERVERS_IP}:10249`;
  c.iptables.minSyncPeriod = 0;
  mutate(c);
  return c;
}

async function startDaemon(c: KubeProxyConfiguration, recorder?: EventRecorder): Promise<Daemon> {
  const d = new Daemon({
    config: c,
    logger: noopLogger,
    env: {},
    listenRetryMs: 50,
    createSources: async (options) => {
      const sources = await createSources(options);
      if (recorder) sources.recorder = recorder;
      return sources;
    },
  });
  daemon = d;
  await d.start();
  return d;
}

async function scrape(): Promise<ReturnType<typeof parseExposition>> {
  return parseExposition(await (await fetch(`http://${SERVERS_IP}:10249/metrics`)).text());
}

describe('Daemon', () => {
  it('proxies the manifest’s Services and serves health and metrics', async () => {
    await writeFile(manifest, serviceOn(A));
    const events: string[] = [];
    const d = await startDaemon(config(), {
      event: (ref, type, reason) => events.push(`${ref.kind} ${type} ${reason}`),
    });
    expect(events).toEqual(['Node Normal Starting']);
    expect(d.nodeRef).toMatchObject({ kind: 'Node', uid: d.nodeRef.name });
    await until(
      async () => (await ask(SERVICE_IP, 8080, 'hi')) === 'A:hi',
      'the Service to answer',
    );
    const healthz = await fetch(`http://${SERVERS_IP}:10256/healthz`);
    expect(healthz.status).toBe(200);
    expect(await healthz.json()).toMatchObject({ nodeEligible: true });
    expect((await fetch(`http://${SERVERS_IP}:10256/livez`)).status).toBe(200);
    expect(await (await fetch(`http://${SERVERS_IP}:10249/proxyMode`)).text()).toBe(
      'service-port-portal',
    );
    // Profiling is off by default (enableProfiling).
    expect((await fetch(`http://${SERVERS_IP}:10249/debug/pprof/`)).status).toBe(404);
    const labels = { service: 'default/web:tcp', protocol: 'TCP' };
    await until(
      async () => sampleValue(await scrape(), 'userspace_proxy_connections_active', labels) === 0,
      'the close',
    );
    const m = await scrape();
    expect(sampleValue(m, 'userspace_proxy_connections_total', labels)).toBeGreaterThanOrEqual(1);
    expect(
      sampleValue(m, 'userspace_proxy_bytes_total', { ...labels, direction: 'to_client' }),
    ).toBeGreaterThanOrEqual(4);
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_service_changes_total')).toBe(1);
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_endpoint_changes_total')).toBe(1);
    expect(sampleValue(m, 'kubeproxy_proxy_healthz_total', { code: '200' })).toBe(1);
    expect(sampleValue(m, 'userspace_proxy_service_ports')).toBe(1);
  });

  it('serves profiles on the metrics server with enableProfiling', async () => {
    await writeFile(manifest, serviceOn(A));
    await startDaemon(config((c) => (c.enableProfiling = true)));
    const index = await fetch(`http://${SERVERS_IP}:10249/debug/pprof/`);
    expect(index.status).toBe(200);
    const heap = await fetch(`http://${SERVERS_IP}:10249/debug/pprof/heap`);
    expect(heap.status).toBe(200);
    expect(await heap.json()).toHaveProperty('head.callFrame');
  });

  it('applies a manifest edit live, keeping an established connection up across it', async () => {
    await writeFile(manifest, serviceOn(A));
    await startDaemon(config());
    await until(async () => (await ask(SERVICE_IP, 8080, 'x')) === 'A:x', 'the Service to answer');
    const client = new Client(SERVICE_IP, 8080);
    cleanups.push(() => client.socket.destroy());
    await client.roundTrip('one', 'A:one');

    await writeFile(manifest, serviceOn(B));
    await until(
      async () => (await ask(SERVICE_IP, 8080, 'y')) === 'B:y',
      'new connections to reach B',
    );
    await client.roundTrip('two', 'A:two'); // the old connection still reaches A

    await writeFile(
      manifest,
      `${serviceOn(A)}---\nkind: Service\nmetadata: { name: bad }\nspec: { ports: [{ port: 0 }] }\n`,
    );
    await until(
      async () =>
        sampleValue(await scrape(), 'userspace_proxy_manifest_reloads_total', {
          result: 'rejected',
        }) === 1,
      'the invalid edit to be rejected',
    );
    expect(await ask(SERVICE_IP, 8080, 'z')).toBe('B:z'); // the last good state keeps serving
    await client.roundTrip('three', 'A:three');
    expect(client.closed).toBe(false);
  });

  it('on stop, refuses new connections, lets established ones finish, then exits 0', async () => {
    await writeFile(manifest, serviceOn(A));
    const d = await startDaemon(
      config((c) => {
        c.userspaceProxy.drainTimeout = 60_000;
      }),
    );
    await until(async () => (await ask(SERVICE_IP, 8080, 'x')) === 'A:x', 'the Service to answer');
    const client = new Client(SERVICE_IP, 8080);
    await client.roundTrip('before', 'A:before');
    let code: number | undefined;
    void d.exited.then((c) => {
      code = c;
    });
    void d.stop('SIGTERM');
    await until(
      async () => (await ask(SERVICE_IP, 8080, 'late')) === 'ECONNREFUSED',
      'the listener to close',
    );
    expect((await fetch(`http://${SERVERS_IP}:10256/healthz`)).status).toBe(503);
    expect((await fetch(`http://${SERVERS_IP}:10256/livez`)).status).toBe(200);
    await client.roundTrip('during', 'A:during');
    expect(code).toBeUndefined();
    client.socket.end();
    expect(await d.exited).toBe(0);
    daemon = undefined;
  });

  it('closes what is left when the drain timeout passes, or on a second stop', async () => {
    await writeFile(manifest, serviceOn(A));
    const d = await startDaemon(
      config((c) => {
        c.userspaceProxy.drainTimeout = 60_000;
      }),
    );
    await until(async () => (await ask(SERVICE_IP, 8080, 'x')) === 'A:x', 'the Service to answer');
    const client = new Client(SERVICE_IP, 8080);
    cleanups.push(() => client.socket.destroy());
    await client.roundTrip('hi', 'A:hi');
    void d.stop('SIGTERM');
    void d.stop('SIGINT'); // a second signal cuts the drain short
    expect(await d.exited).toBe(0);
    daemon = undefined;
  });

  it('exits 0 once the drain timeout passes with connections still open', async () => {
    await writeFile(manifest, serviceOn(A));
    const d = await startDaemon(
      config((c) => {
        c.userspaceProxy.drainTimeout = 100;
      }),
    );
    await until(async () => (await ask(SERVICE_IP, 8080, 'x')) === 'A:x', 'the Service to answer');
    const client = new Client(SERVICE_IP, 8080);
    cleanups.push(() => client.socket.destroy());
    await client.roundTrip('hi', 'A:hi');
    void d.stop('SIGTERM');
    expect(await d.exited).toBe(0);
    daemon = undefined;
  });

  it('with bindAddressHardFail, exits 1 when a server cannot listen, after a Warning event', async () => {
    const blocker: Server = createServer();
    await new Promise<void>((resolve) => blocker.listen(10249, SERVERS_IP, resolve));
    cleanups.push(() => new Promise((r) => blocker.close(r)));
    await writeFile(manifest, serviceOn(A));
    const events: string[] = [];
    const d = await startDaemon(
      config((c) => {
        c.bindAddressHardFail = true;
      }),
      { event: (_ref, type, reason, message) => events.push(`${type} ${reason} ${message}`) },
    );
    expect(await d.exited).toBe(1);
    daemon = undefined;
    expect(events).toContainEqual(
      expect.stringMatching(
        new RegExp(
          `^Warning FailedToStartMetricServer failed to start metrics server on ${SERVERS_IP.replaceAll('.', '\\.')}:10249: .*EADDRINUSE`,
        ),
      ),
    );
  });

  it('without hard fail, keeps retrying the bind and serves once the port is free', async () => {
    const blocker: Server = createServer();
    await new Promise<void>((resolve) => blocker.listen(10249, SERVERS_IP, resolve));
    await writeFile(manifest, serviceOn(A));
    const d = await startDaemon(config());
    await until(async () => (await ask(SERVICE_IP, 8080, 'x')) === 'A:x', 'the Service to answer');
    expect(d.metricsAddress()).toBeUndefined();
    await new Promise((r) => blocker.close(r));
    await until(() => d.metricsAddress() !== undefined, 'the metrics server to listen');
    expect((await fetch(`http://${SERVERS_IP}:10249/healthz`)).status).toBe(200);
  });

  it('turns /healthz and /livez 503 once a queued change waits 2 × syncPeriod, and 200 after a sync', async () => {
    await writeFile(manifest, serviceOn(A));
    let now = Date.UTC(2024, 0, 1);
    let initialized = false;
    const noop = () => {};
    const proxier: Proxier = {
      mode: 'service-port-portal',
      drain: async () => ({ remaining: 0, timedOut: false }),
      pendingChanges: () => 0,
      onServiceAdd: noop,
      onServiceUpdate: noop,
      onServiceDelete: noop,
      onServiceSynced: noop,
      onEndpointsAdd: noop,
      onEndpointsUpdate: noop,
      onEndpointsDelete: noop,
      onEndpointsSynced: noop,
      onEndpointSliceAdd: noop,
      onEndpointSliceUpdate: noop,
      onEndpointSliceDelete: noop,
      onEndpointSlicesSynced: noop,
      sync: noop,
      syncLoop: (signal) =>
        new Promise((resolve) => signal?.addEventListener('abort', () => resolve())),
      getServiceInfo: () => undefined,
      serviceInfos: () => [],
      isInitialized: () => initialized,
      shutdown: async () => {},
    };
    const d = new Daemon({
      config: config(),
      logger: noopLogger,
      env: {},
      clock: { now: () => now },
      createProxier: async () => proxier,
    });
    daemon = d;
    await d.start();
    await until(() => d.healthAddress() !== undefined, 'the health server');
    const status = async (path: string) =>
      (await fetch(`http://${SERVERS_IP}:10256${path}`)).status;
    const publish = (name: string, message: unknown) =>
      diagnosticsChannel.channel(name).publish(message);

    publish(CHANNELS.serviceChange, { service: 'default/web' }); // not initialized yet: not queued
    now += 120_000;
    expect(await status('/healthz')).toBe(200);

    initialized = true;
    publish(CHANNELS.serviceChange, { service: 'default/web' });
    now += 59_999;
    expect(await status('/healthz')).toBe(200);
    now += 1;
    expect(await status('/healthz')).toBe(503);
    expect(await status('/livez')).toBe(503);

    publish(CHANNELS.sync, { durationMs: 1, changes: 1, servicePorts: 1 });
    expect(await status('/healthz')).toBe(200);
    const m = await scrape();
    expect(sampleValue(m, 'kubeproxy_proxy_healthz_total', { code: '503' })).toBe(1);
    expect(sampleValue(m, 'kubeproxy_proxy_livez_total', { code: '503' })).toBe(1);
  });

  it('uses the cluster source for --master, with the node name, resync period and eligibility', async () => {
    const parsed = parseManifest(serviceOn(A));
    if (!parsed.ok) throw new Error(parsed.errors.join());
    const services = new StaticInformer<Service>();
    const endpointSlices = new StaticInformer<EndpointSlice>();
    let got: KubernetesSourcesOptions | undefined;
    const d = new Daemon({
      config: config((c) => {
        c.userspaceProxy.servicesFile = '';
        c.hostnameOverride = 'node-7';
      }),
      master: 'https://api.example:6443',
      logger: noopLogger,
      env: {},
      clusterSource: async (options) => {
        got = options;
        return {
          services,
          endpointSlices,
          nodeEligible: () => false,
          nodeIPs: () => ['10.0.0.7'],
          run: async () => {
            endpointSlices.replace(parsed.contents.endpointSlices);
            services.replace(parsed.contents.services);
          },
        };
      },
    });
    daemon = d;
    await d.start();
    expect(got).toMatchObject({
      master: 'https://api.example:6443',
      nodeName: 'node-7',
      useEndpointSlices: true,
      resyncPeriodMs: 900_000,
    });
    await until(async () => (await ask(SERVICE_IP, 8080, 'k')) === 'A:k', 'the Service to answer');
    await until(() => d.healthAddress() !== undefined, 'the health server');
    expect((await fetch(`http://${SERVERS_IP}:10256/healthz`)).status).toBe(503); // node ineligible
    expect((await fetch(`http://${SERVERS_IP}:10256/livez`)).status).toBe(200);
  });

  it('fails to start on an invalid manifest, before listening anywhere', async () => {
    await writeFile(
      manifest,
      'kind: Service\nmetadata: { name: a }\nspec: { ports: [{ port: 0 }] }\n',
    );
    const d = new Daemon({ config: config(), logger: noopLogger, env: {} });
    await expect(d.start()).rejects.toThrow(/invalid services file/);
    expect(d.healthAddress()).toBeUndefined();
  });
});
