import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { noopLogger } from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defaultConfiguration } from './config-schema.js';
import { Daemon } from './daemon.js';
import { HTTP_MAX_CONNECTIONS, HTTP_MAX_CONNECTIONS_PER_CLIENT } from './http-guard.js';
import { ask, type Backends, startBackends } from './test-support/backends.js';
import { closedOnArrival, httpStatus } from './test-support/http-get.js';
import { loopbackBlock } from './test-support/loopback.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { parseExposition, sampleValue } from './test-support/prom-text.js';
import { until } from './test-support/wait.js';

// Issue 12, defect 2: idle connections to the health port must not stop the proxy or the metrics
// server (they did, for about 30 s, once they had taken the process's descriptors). Probe defect 8:
// nor may one client's take the health server from the others.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const SERVICE_IP = `${NET}1`;
const BACKEND = `${NET}2`;
const SERVERS_IP = `${NET}4`;

let dir: string;
let backends: Backends;
let daemon: Daemon | undefined;
const idle: Socket[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-http-limits-'));
  backends = await startBackends({ A: BACKEND });
});

afterEach(async () => {
  for (const s of idle.splice(0)) s.destroy();
  if (daemon) {
    void daemon.stop('test over', { drain: false });
    await daemon.exited;
  }
  daemon = undefined;
  await backends.close();
  await rm(dir, { recursive: true, force: true });
});

/** Opens `count` idle connections to the health port from `from`; records the ones closed. */
async function flood(from: string, count: number, closed: Set<Socket>): Promise<Socket[]> {
  return Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<Socket>((resolve) => {
          const socket = new Socket();
          idle.push(socket);
          socket.on('error', () => {});
          socket.on('close', () => closed.add(socket));
          socket.connect({ port: 10256, host: SERVERS_IP, localAddress: from }, () =>
            resolve(socket),
          );
        }),
    ),
  );
}

describe('the health server under a flood of idle connections', () => {
  it('keeps its caps, per client and in all, and the proxy and the metrics server go on serving', async () => {
    const manifest = join(dir, 'services.yaml');
    await writeFile(
      manifest,
      serviceWithSlice({
        clusterIP: SERVICE_IP,
        port: 8080,
        endpoints: [{ ip: BACKEND, port: backends.port }],
      }),
    );
    const config = defaultConfiguration();
    config.userspaceProxy.servicesFile = manifest;
    config.healthzBindAddress = `${SERVERS_IP}:10256`;
    config.metricsBindAddress = `${SERVERS_IP}:10249`;
    // The deadlines that reap idle connections (3 s for headers, 10 s idle) are pushed far away, so
    // that the flood stays put while the test counts it, however slow the machine.
    const far = 600_000;
    daemon = new Daemon({
      config,
      logger: noopLogger,
      env: {},
      listenRetryMs: 50,
      httpLimits: { headersTimeoutMs: far, requestTimeoutMs: far, idleTimeoutMs: far },
    });
    await daemon.start();
    await until(async () => (await ask(SERVICE_IP, 8080, 'a', 1000)) === 'A:a', 'the Service');
    const refused = async (reason: string) =>
      sampleValue(
        parseExposition(await (await fetch(`http://${SERVERS_IP}:10249/metrics`)).text()),
        'userspace_proxy_http_connections_refused_total',
        { server: 'healthz', reason },
      );

    // One client alone (probe defect 8: 64 idle connections from one address took /healthz away
    // from everyone, and the kubelet restarted the pod) keeps its own cap's worth.
    const closed = new Set<Socket>();
    const count = HTTP_MAX_CONNECTIONS + 100;
    const first = await flood(`${NET}10`, count, closed);
    const overClient = count - HTTP_MAX_CONNECTIONS_PER_CLIENT;
    await until(() => closed.size >= overClient, 'the connections over the client cap');
    expect(closed.size).toBe(overClient);
    expect(await httpStatus(`http://${SERVERS_IP}:10256/healthz`, 2000, `${NET}20`)).toBe(200);
    expect(await refused('client-limit')).toBeGreaterThanOrEqual(overClient);

    // Clients enough to fill the server: its own cap holds, and only the health server refuses.
    const others = HTTP_MAX_CONNECTIONS / HTTP_MAX_CONNECTIONS_PER_CLIENT - 1;
    for (let i = 0; i < others; i++) {
      await flood(`${NET}${11 + i}`, HTTP_MAX_CONNECTIONS_PER_CLIENT, closed);
    }
    expect(closed.size).toBe(overClient);
    const status = await httpStatus(`http://${SERVERS_IP}:10256/healthz`, 2000, `${NET}20`);
    expect(closedOnArrival(status)).toBe(true);
    expect(await ask(SERVICE_IP, 8080, 'b', 1000)).toBe('A:b');
    expect(await httpStatus(`http://${SERVERS_IP}:10249/healthz`)).toBe(200);
    expect(await refused('connection-limit')).toBeGreaterThanOrEqual(1);

    // By default the idle ones are closed at the header deadline (3 s); here they leave, and the
    // health server answers again.
    for (const s of idle.splice(0)) s.destroy();
    expect(first).toHaveLength(count);
    await until(
      async () => (await httpStatus(`http://${SERVERS_IP}:10256/healthz`)) === 200,
      'healthz',
    );
  });
});
