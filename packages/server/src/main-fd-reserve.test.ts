import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ask, type Backends, Client, startBackends } from './test-support/backends.js';
import { REPO_ROOT } from './test-support/daemon-process.js';
import { closedOnArrival, httpStatus } from './test-support/http-get.js';
import { loopbackBlock } from './test-support/loopback.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { until } from './test-support/wait.js';

// Issue 12, defect 2, in the real process under a small descriptor limit: when proxied connections
// bring the daemon near its limit, the health and metrics servers give way (they refuse new
// connections) while the proxy keeps accepting, and they answer again once descriptors free up.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const SERVICE_IP = `${NET}1`;
const BACKEND_IP = `${NET}2`;
const SERVERS_IP = `${NET}4`;
const LIMIT = 256; // the reserve is a quarter of it: 64
const MAIN = new URL('./main.ts', import.meta.url).pathname;

let dir: string;
let backends: Backends;
const clients: Client[] = [];
let stopDaemon: (() => void) | undefined;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-fd-reserve-'));
  backends = await startBackends({ A: BACKEND_IP });
});

afterEach(async () => {
  for (const c of clients.splice(0)) c.socket.destroy();
  stopDaemon?.();
  await backends.close();
  await rm(dir, { recursive: true, force: true });
});

describe.runIf(process.platform === 'linux' && existsSync('/usr/bin/prlimit'))(
  'the descriptor reserve',
  () => {
    it('keeps the last descriptors for proxying', { timeout: 120_000 }, async () => {
      const manifest = join(dir, 'services.yaml');
      await writeFile(
        manifest,
        serviceWithSlice({
          clusterIP: SERVICE_IP,
          port: 8080,
          endpoints: [{ ip: BACKEND_IP, port: backends.port }],
        }),
      );
      const child = spawn(
        '/usr/bin/prlimit',
        [
          `--nofile=${LIMIT}:${LIMIT}`,
          '--',
          process.execPath,
          '--conditions=@userspace-proxy/source',
          '--import',
          'tsx',
          MAIN,
          '--services-file',
          manifest,
          '--healthz-bind-address',
          `${SERVERS_IP}:10256`,
          '--metrics-bind-address',
          `${SERVERS_IP}:10249`,
        ],
        { cwd: REPO_ROOT, env: { ...process.env, KUBERNETES_SERVICE_HOST: '' }, stdio: 'ignore' },
      );
      stopDaemon = () => child.kill('SIGKILL');
      const health = () => httpStatus(`http://${SERVERS_IP}:10256/healthz`);
      await until(async () => (await health()) === 200, 'the health server', 60_000);
      await until(async () => (await ask(SERVICE_IP, 8080, 'a', 1000)) === 'A:a', 'the Service');

      // Hold proxied connections (two descriptors each) until the health server gives way.
      let refused = false;
      while (!refused && clients.length < 110) {
        // 60 at once (far from the limit: 120 descriptors of 256), then 5 at a time.
        const batch = clients.length === 0 ? 60 : 5;
        for (let i = 0; i < batch; i++) {
          const client = new Client(SERVICE_IP, 8080);
          client.socket.write('x'); // answered "A:x" once proxied
          clients.push(client);
        }
        await until(
          () => clients.every((c) => c.received !== '' || c.closed),
          'the held connections to be proxied',
        );
        await new Promise((resolve) => setTimeout(resolve, 1100)); // the next descriptor count
        refused = closedOnArrival(await health());
      }
      expect(refused).toBe(true);
      expect(clients.every((c) => !c.closed)).toBe(true);
      expect(closedOnArrival(await httpStatus(`http://${SERVERS_IP}:10249/healthz`))).toBe(true);
      // The proxy still has its reserve.
      expect(await ask(SERVICE_IP, 8080, 'b', 1000)).toBe('A:b');

      for (const c of clients.splice(0)) c.socket.destroy();
      await until(async () => (await health()) === 200, 'the health server to answer again');
    });
  },
);
