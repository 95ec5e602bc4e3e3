import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { noopLogger } from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defaultConfiguration } from './config-schema.js';
import { Daemon } from './daemon.js';
import { createSources } from './source-select.js';
import { type Backends, Client, startBackends } from './test-support/backends.js';
import { loopbackBlock } from './test-support/loopback.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { parseExposition, sampleValue } from './test-support/prom-text.js';
import { until } from './test-support/wait.js';

// Loopback addresses of this file: the Service, its endpoint, and the daemon's servers.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const SERVICE_IP = `${NET}1`;
const A = `${NET}2`;
const SERVERS_IP = `${NET}4`;
const IDLED = 'idling.alpha.openshift.io/idled-at: "2026-12-01T08:00:00Z"';

let dir: string;
let manifest: string;
let backends: Backends;
let daemon: Daemon | undefined;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-idling-'));
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

/** The Service "default/web" marked idled, with the endpoints given. */
function idledService(...ips: string[]): string {
  return serviceWithSlice({
    clusterIP: SERVICE_IP,
    port: 8080,
    portName: 'tcp',
    endpoints: ips.map((ip) => ({ ip, port: backends.port })),
  }).replace(
    'metadata: { name: web, namespace: default }',
    `metadata: { name: web, namespace: default, annotations: { ${IDLED} } }`,
  );
}

describe('the daemon with --idling', () => {
  it('holds a client of an idled Service, asks for pods, and hands the client over when the endpoint comes', async () => {
    await writeFile(manifest, idledService());
    const events: string[] = [];
    const c = defaultConfiguration();
    c.userspaceProxy.servicesFile = manifest;
    c.userspaceProxy.idling = true;
    c.healthzBindAddress = `${SERVERS_IP}:10256`;
    c.metricsBindAddress = `${SERVERS_IP}:10249`;
    c.iptables.minSyncPeriod = 0;
    daemon = new Daemon({
      config: c,
      logger: noopLogger,
      env: {},
      listenRetryMs: 50,
      createSources: async (options) => {
        const sources = await createSources(options);
        sources.recorder = {
          event: (ref, type, reason, message) =>
            events.push(`${ref.kind} ${ref.name} ${type} ${reason}: ${message}`),
        };
        return sources;
      },
    });
    await daemon.start();
    const scrape = async () =>
      parseExposition(await (await fetch(`http://${SERVERS_IP}:10249/metrics`)).text());
    const labels = { service: 'default/web:tcp', protocol: 'TCP' };

    // The idled Service answers: the client is accepted and held, its request kept.
    let client: Client | undefined;
    await until(async () => {
      client?.socket.destroy();
      client = new Client(SERVICE_IP, 8080);
      client.socket.write('wake');
      const m = await scrape();
      return sampleValue(m, 'userspace_proxy_idler_held_connections', labels) === 1;
    }, 'a client held by the idled Service');
    expect(events).toContain(
      'Service web Normal NeedPods: The service-port default/web:tcp needs pods.',
    );

    // The pods come: the held client is handed over, its early bytes first.
    await writeFile(manifest, idledService(A));
    await until(() => client?.received === 'A:wake', 'the held request answered');
    const m = await scrape();
    expect(
      sampleValue(m, 'userspace_proxy_idler_released_total', { ...labels, outcome: 'handed-over' }),
    ).toBeGreaterThanOrEqual(1);
    client?.socket.destroy();
  });
});
