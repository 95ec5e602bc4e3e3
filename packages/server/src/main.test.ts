import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ask, type Backends, Client, startBackends } from './test-support/backends.js';
import { daemonConfigText } from './test-support/config-file.js';
import { type DaemonProcess, killDaemon, spawnDaemon } from './test-support/daemon-process.js';
import { loopbackBlock } from './test-support/loopback.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { parseExposition, sampleValue } from './test-support/prom-text.js';
import { until } from './test-support/wait.js';
import { VERSION } from './version.js';

// End to end: the real bin in its own process. Loopback addresses of this file only.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const SERVICE_IP = `${NET}1`;
const BACKEND_IP = `${NET}2`;
const SERVERS_IP = `${NET}4`;

let dir: string;
let backends: Backends | undefined;
let proc: DaemonProcess | undefined;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-main-'));
});

afterEach(async () => {
  await killDaemon(proc);
  proc = undefined;
  await backends?.close();
  backends = undefined;
  await rm(dir, { recursive: true, force: true });
});

// Each test starts the bin once or twice: ~2 CPU-seconds each (Node, and tsx compiling the sources),
// 11 s of wall time seen on a loaded 2-core machine, where the default 20 s per test timed out.
describe('userspace-proxy (the process)', { timeout: 90_000 }, () => {
  it('prints its version and help', async () => {
    proc = spawnDaemon(['--version']);
    expect(await proc.exited).toBe(0);
    expect(proc.stdout()).toBe(`userspace-proxy v${VERSION}\n`);
    proc = spawnDaemon(['--help']);
    expect(await proc.exited).toBe(0);
    expect(proc.stdout()).toContain('--services-file <path>');
  });

  it('lists every configuration error at once and exits 1', async () => {
    const config = join(dir, 'config.yaml');
    await writeFile(
      config,
      'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nbindAddress: here\nmode: iptables\nsurprise: 1\n',
    );
    proc = spawnDaemon(['--config', config]);
    expect(await proc.exited).toBe(1);
    expect(proc.stderr()).toBe(
      [
        'Warning: unknown field "surprise" is ignored',
        'failed validate:',
        '  KubeProxyConfiguration.Mode.ProxyMode: Invalid value: "iptables": must be service-port-portal,userspace or blank (blank means the best-available proxy [currently service-port-portal])',
        '  KubeProxyConfiguration.BindAddress: Invalid value: "here": not a valid textual representation of an IP address',
        '  no source of Services: give --services-file (or userspaceProxy.servicesFile), or --kubeconfig/--master for a cluster',
        '',
      ].join('\n'),
    );
  });

  it('proxies traffic, serves /metrics, and drains on SIGTERM before exiting 0', async () => {
    backends = await startBackends({ A: BACKEND_IP });
    await writeFile(
      join(dir, 'services.yaml'),
      serviceWithSlice({
        clusterIP: SERVICE_IP,
        port: 8080,
        portName: 'tcp',
        endpoints: [{ ip: BACKEND_IP, port: backends.port }],
      }),
    );
    const config = join(dir, 'config.yaml');
    await writeFile(
      config,
      daemonConfigText(SERVERS_IP, [
        'iptables: { minSyncPeriod: 10ms }',
        'userspaceProxy: { servicesFile: services.yaml, drainTimeout: 1m }',
      ]),
    );
    proc = spawnDaemon(['--config', config, '--logging-format', 'json']);
    await until(
      async () => (await ask(SERVICE_IP, 8080, 'ping', 1000)) === 'A:ping',
      'the Service to answer',
      30_000,
    );

    const client = new Client(SERVICE_IP, 8080);
    await client.roundTrip('held', 'A:held');
    const metrics = parseExposition(
      await (await fetch(`http://${SERVERS_IP}:10249/metrics`)).text(),
    );
    const labels = { service: 'default/web:tcp', protocol: 'TCP' };
    expect(
      sampleValue(metrics, 'userspace_proxy_connections_total', labels),
    ).toBeGreaterThanOrEqual(2);
    expect(sampleValue(metrics, 'userspace_proxy_connections_active', labels)).toBe(1);
    expect(
      sampleValue(metrics, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds'),
    ).toBeGreaterThan(0);

    const daemon = proc;
    daemon.child.kill('SIGTERM');
    // Probe only once the listeners are closed: a probe racing the signal would be accepted and
    // counted among the connections the drain waits for.
    await until(
      () => daemon.stderr().includes('stopped accepting'),
      'the proxier to stop accepting',
    );
    await until(
      async () => (await ask(SERVICE_IP, 8080, 'late', 1000)) === 'ECONNREFUSED',
      'the listener to close',
    );
    await client.roundTrip('still', 'A:still');
    expect(proc.child.exitCode).toBeNull();
    client.socket.end();
    expect(await proc.exited).toBe(0);
    const lines = proc
      .stderr()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const messages = lines.map((l) => String(l['0']));
    expect(messages).toContainEqual(expect.stringMatching(/^event Normal Starting on Node /));
    expect(messages).toContain('stopping (SIGTERM): no new connections are accepted');
    expect(messages).toContainEqual(
      expect.stringMatching(/^stopped accepting; waiting up to 60000 ms for 1 connection/),
    );
  });

  it('--cleanup removes the userspace chains with iptables and exits 0, or 1 when that fails', async () => {
    const log = join(dir, 'calls.log');
    const fake = (body: string) => `#!/bin/sh\necho "$(basename "$0") $*" >> "${log}"\n${body}\n`;
    for (const name of ['iptables', 'ip6tables']) {
      await writeFile(
        join(dir, name),
        fake(
          'case "$*" in *" -D "*) echo "iptables: Bad rule (does a matching rule exist in that chain?)." >&2; exit 1;; esac\nexit 0',
        ),
      );
      await chmod(join(dir, name), 0o755);
    }
    const env = { PATH: `${dir}:${process.env.PATH ?? ''}` };
    proc = spawnDaemon(['--cleanup'], env);
    expect(await proc.exited).toBe(0);
    const calls = await readFile(log, 'utf8');
    expect(calls).toMatch(/^iptables .*-D PREROUTING/m);
    expect(calls).toMatch(/^iptables .*-X KUBE-PORTALS-CONTAINER/m);
    expect(calls).toMatch(/^ip6tables .*-X KUBE-NODEPORT-NON-LOCAL/m);

    for (const name of ['iptables', 'ip6tables']) {
      await writeFile(
        join(dir, name),
        fake('echo "iptables v1.8.9: Permission denied (you must be root)" >&2; exit 4'),
      );
    }
    proc = spawnDaemon(['--cleanup'], env);
    expect(await proc.exited).toBe(1);
    expect(proc.stderr()).toContain('encountered an error while tearing down rules');
  });
});
