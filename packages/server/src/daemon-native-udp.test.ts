import dgram from 'node:dgram';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { noopLogger } from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defaultConfiguration } from './config-schema.js';
import { Daemon } from './daemon.js';
import { childCommandLines } from './test-support/children.js';
import { loopbackBlock } from './test-support/loopback.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { until } from './test-support/wait.js';

// Loopback addresses of this file: the Service, the endpoint, the daemon's servers.
const NET = loopbackBlock();
const SERVICE_IP = `${NET}1`;
const ECHO_IP = `${NET}2`;
const SERVERS_IP = `${NET}4`;

let dir: string;
let echo: dgram.Socket;
let daemon: Daemon | undefined;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-native-udp-'));
  echo = dgram.createSocket('udp4');
  echo.on('message', (msg, from) =>
    echo.send(Buffer.concat([Buffer.from('E:'), msg]), from.port, from.address),
  );
  await new Promise<void>((resolve) => echo.bind(0, ECHO_IP, resolve));
});

afterEach(async () => {
  if (daemon) {
    void daemon.stop('test over', { drain: false });
    await daemon.exited;
  }
  daemon = undefined;
  echo.close();
  await rm(dir, { recursive: true, force: true });
});

const udpHelpers = (): string[] =>
  childCommandLines().filter((c) => c.includes('udp-relay-helper'));

/** One datagram to the Service and its answer, or "" after 500 ms. */
async function askUdp(text: string): Promise<string> {
  const client = dgram.createSocket('udp4');
  try {
    return await new Promise<string>((resolve) => {
      const timer = setTimeout(() => resolve(''), 500);
      client.on('message', (msg) => {
        clearTimeout(timer);
        resolve(msg.toString());
      });
      client.send(text, 5353, SERVICE_IP);
    });
  } finally {
    client.close();
  }
}

describe('the daemon with --data-path native, UDP', () => {
  it('relays UDP through the UDP helper, and stops it with the daemon', async () => {
    const manifest = join(dir, 'services.yaml');
    await writeFile(
      manifest,
      serviceWithSlice({
        clusterIP: SERVICE_IP,
        port: 5353,
        portName: 'dns',
        protocol: 'UDP',
        endpoints: [{ ip: ECHO_IP, port: (echo.address() as { port: number }).port }],
      }),
    );
    const c = defaultConfiguration();
    c.userspaceProxy.servicesFile = manifest;
    c.userspaceProxy.dataPath = 'native';
    c.healthzBindAddress = `${SERVERS_IP}:10256`;
    c.metricsBindAddress = `${SERVERS_IP}:10249`;
    c.iptables.minSyncPeriod = 0;
    const before = udpHelpers().length;
    daemon = new Daemon({ config: c, logger: noopLogger, env: {}, listenRetryMs: 50 });
    await daemon.start();
    await until(async () => (await askUdp('q')) === 'E:q', 'the UDP Service to answer', 60_000);
    expect(udpHelpers().length).toBe(before + 1);
    void daemon.stop('test over', { drain: false });
    await daemon.exited;
    daemon = undefined;
    await until(() => udpHelpers().length === before, 'the UDP helper to exit with the daemon');
  }, 90_000);
});
