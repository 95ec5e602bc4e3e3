import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { noopLogger } from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defaultConfiguration, type KubeProxyConfiguration } from './config-schema.js';
import { Daemon } from './daemon.js';
import { ask, type Backends, Client, startBackends } from './test-support/backends.js';
import { childCommandLines } from './test-support/children.js';
import { loopbackBlock } from './test-support/loopback.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { parseExposition, sampleValue } from './test-support/prom-text.js';
import { until } from './test-support/wait.js';

// Loopback addresses of this file: the Services, the endpoint, the daemon's servers.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const SERVICE_IP = `${NET}1`;
const PROXIED_IP = `${NET}5`;
const A = `${NET}2`;
const SERVERS_IP = `${NET}4`;

let dir: string;
let manifest: string;
let backends: Backends;
let daemon: Daemon | undefined;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-native-'));
  manifest = join(dir, 'services.yaml');
  backends = await startBackends({ A });
});

afterEach(async () => {
  if (daemon) {
    void daemon.stop('test over', { drain: false });
    await daemon.exited;
  }
  daemon = undefined;
  await backends.close();
  await rm(dir, { recursive: true, force: true });
});

function config(mutate: (c: KubeProxyConfiguration) => void = () => {}): KubeProxyConfiguration {
  const c = defaultConfiguration();
  c.userspaceProxy.servicesFile = manifest;
  c.userspaceProxy.dataPath = 'native';
  c.healthzBindAddress = `${SERVERS_IP}:10256`;
  c.metricsBindAddress = `${SERVERS_IP}:10249`;
  c.iptables.minSyncPeriod = 0;
  mutate(c);
  return c;
}

const helpers = (): string[] => childCommandLines().filter((c) => c.includes('tcp-relay-helper'));

describe('the daemon with --data-path native', () => {
  it('relays TCP through the helper, counts it in the metrics, and stops the helper with the daemon', async () => {
    await writeFile(
      manifest,
      serviceWithSlice({
        clusterIP: SERVICE_IP,
        port: 8080,
        portName: 'tcp',
        endpoints: [{ ip: A, port: backends.port }],
      }),
    );
    const before = helpers().length;
    daemon = new Daemon({ config: config(), logger: noopLogger, env: {}, listenRetryMs: 50 });
    await daemon.start();
    await until(
      async () => (await ask(SERVICE_IP, 8080, 'hi')) === 'A:hi',
      'the Service to answer',
      60_000,
    );
    expect(helpers().length).toBe(before + 1);
    const labels = { service: 'default/web:tcp', protocol: 'TCP' };
    await until(async () => {
      const m = parseExposition(await (await fetch(`http://${SERVERS_IP}:10249/metrics`)).text());
      return (
        (sampleValue(m, 'userspace_proxy_connections_total', labels) ?? 0) >= 1 &&
        (sampleValue(m, 'userspace_proxy_bytes_total', { ...labels, direction: 'to_client' }) ??
          0) >= 4 &&
        sampleValue(m, 'userspace_proxy_native_helper_starts_total', { protocol: 'TCP' }) === 1 &&
        sampleValue(m, 'userspace_proxy_native_helper_exits_total', { protocol: 'TCP' }) === 0
      );
    }, 'the connection, its bytes and the helper start in the metrics');
    void daemon.stop('test over', { drain: false });
    await daemon.exited;
    daemon = undefined;
    await until(() => helpers().length === before, 'the helper to exit with the daemon');
  }, 90_000);

  it('keeps the Node socket for a Service that asks for a PROXY protocol header', async () => {
    const annotated = serviceWithSlice({
      name: 'pp',
      clusterIP: PROXIED_IP,
      port: 8081,
      portName: 'tcp',
      endpoints: [{ ip: A, port: backends.port }],
    }).replace(
      'metadata: { name: pp, namespace: default }',
      'metadata: { name: pp, namespace: default, annotations: { userspace-proxy.io/proxy-protocol: v1 } }',
    );
    expect(annotated).toContain('proxy-protocol: v1');
    await writeFile(manifest, annotated);
    daemon = new Daemon({ config: config(), logger: noopLogger, env: {}, listenRetryMs: 50 });
    await daemon.start();
    // The echo backend answers each chunk it reads: the header (and perhaps the payload with it).
    await until(
      async () => (await ask(PROXIED_IP, 8081, 'hi')).startsWith('A:PROXY TCP4 '),
      'the annotated Service to answer with the PROXY header seen by the endpoint',
      60_000,
    );
  }, 90_000);

  it('with --idling, holds a client of an idled Service in the helper and hands it over', async () => {
    const idled = (...ips: string[]): string =>
      serviceWithSlice({
        clusterIP: SERVICE_IP,
        port: 8082,
        portName: 'tcp',
        endpoints: ips.map((ip) => ({ ip, port: backends.port })),
      }).replace(
        'metadata: { name: web, namespace: default }',
        'metadata: { name: web, namespace: default, annotations: { idling.alpha.openshift.io/idled-at: "2026-12-01T08:00:00Z" } }',
      );
    await writeFile(manifest, idled());
    const before = helpers().length;
    daemon = new Daemon({
      config: config((c) => {
        c.userspaceProxy.idling = true;
      }),
      logger: noopLogger,
      env: {},
      listenRetryMs: 50,
    });
    await daemon.start();
    const labels = { service: 'default/web:tcp', protocol: 'TCP' };
    let client: Client | undefined;
    await until(async () => {
      // A new client only once the last one was refused (the socket was not listening yet): a
      // held client reaches the idler one frame from the helper later than Node's socket would.
      if (client === undefined || client.closed) {
        client = new Client(SERVICE_IP, 8082);
        client.socket.write('wake');
      }
      const m = parseExposition(await (await fetch(`http://${SERVERS_IP}:10249/metrics`)).text());
      return sampleValue(m, 'userspace_proxy_idler_held_connections', labels) === 1;
    }, 'a client held by the idled Service');
    // Only the idled Service is served, by the idling proxier: its socket is the helper's.
    expect(helpers().length).toBe(before + 1);
    await writeFile(manifest, idled(A));
    await until(() => client?.received === 'A:wake', 'the held request answered', 30_000);
    client?.socket.destroy();
  }, 90_000);
});
