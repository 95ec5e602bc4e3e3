import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { noopLogger } from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defaultConfiguration } from './config-schema.js';
import { Daemon } from './daemon.js';
import { HTTP_MAX_CONNECTIONS } from './http-guard.js';
import { ask, type Backends, startBackends } from './test-support/backends.js';
import { closedOnArrival, httpStatus } from './test-support/http-get.js';
import { loopbackBlock } from './test-support/loopback.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { parseExposition, sampleValue } from './test-support/prom-text.js';
import { until } from './test-support/wait.js';

// Issue 12, defect 2: idle connections to the health port must not stop the proxy or the metrics
// server (they did, for about 30 s, once they had taken the process's descriptors).
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

describe('the health server under a flood of idle connections', () => {
  it('keeps its cap, and the proxy and the metrics server go on serving', async () => {
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
    daemon = new Daemon({ config, logger: noopLogger, env: {}, listenRetryMs: 50 });
    await daemon.start();
    await until(async () => (await ask(SERVICE_IP, 8080, 'a', 1000)) === 'A:a', 'the Service');

    const flood = HTTP_MAX_CONNECTIONS + 100;
    const closed = new Set<Socket>();
    await Promise.all(
      Array.from(
        { length: flood },
        () =>
          new Promise<void>((resolve) => {
            const socket = new Socket();
            idle.push(socket);
            socket.on('error', () => {});
            socket.on('close', () => closed.add(socket));
            socket.connect(10256, SERVERS_IP, () => resolve());
          }),
      ),
    );
    await until(() => closed.size >= flood - HTTP_MAX_CONNECTIONS, 'the connections over the cap');
    expect(closed.size).toBe(flood - HTTP_MAX_CONNECTIONS); // the cap's worth are still held

    // The proxy and the metrics server are untouched; the health server refuses while it is full.
    expect(await ask(SERVICE_IP, 8080, 'b', 1000)).toBe('A:b');
    expect(await httpStatus(`http://${SERVERS_IP}:10249/healthz`)).toBe(200);
    expect(closedOnArrival(await httpStatus(`http://${SERVERS_IP}:10256/healthz`))).toBe(true);
    const text = await (await fetch(`http://${SERVERS_IP}:10249/metrics`)).text();
    const refused = sampleValue(
      parseExposition(text),
      'userspace_proxy_http_connections_refused_total',
      {
        server: 'healthz',
        reason: 'connection-limit',
      },
    );
    expect(refused).toBeGreaterThanOrEqual(flood - HTTP_MAX_CONNECTIONS);

    // The idle ones are closed after the idle timeout (10 s); here they leave, and health answers.
    for (const s of idle.splice(0)) s.destroy();
    await until(
      async () => (await httpStatus(`http://${SERVERS_IP}:10256/healthz`)) === 200,
      'healthz',
    );
  });
});
