import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ask, type Backends, Client, startBackends } from '../test-support/backends.js';
import { daemonConfigText } from '../test-support/config-file.js';
import { type DaemonProcess, killDaemon, spawnDaemon } from '../test-support/daemon-process.js';
import { loopbackBlock } from '../test-support/loopback.js';
import { parseExposition, sampleValue } from '../test-support/prom-text.js';
import { until } from '../test-support/wait.js';

// End to end with `--workers 2`: the real bin, its primary and two node:cluster workers, on
// loopback addresses of this file only.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const SERVICE_IP = `${NET}1`;
const A = `${NET}2`;
const B = `${NET}3`;
const SERVERS_IP = `${NET}4`;
const UDP_BACKEND = `${NET}5`;
const METRICS = `http://${SERVERS_IP}:10249`;
/** Workers load the whole daemon from source (tsx) on a loaded machine: allow for it. */
const START_MS = 60_000;

let dir: string;
let backends: Backends | undefined;
let udpBackend: UdpSocket | undefined;
let proc: DaemonProcess | undefined;
const clients: Client[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-workers-'));
});

afterEach(async () => {
  for (const c of clients.splice(0)) c.socket.destroy();
  await killDaemon(proc);
  proc = undefined;
  await backends?.close();
  backends = undefined;
  udpBackend?.close();
  udpBackend = undefined;
  await rm(dir, { recursive: true, force: true });
});

/** A Service with a TCP and a UDP port, its TCP endpoint on `tcpIP`. */
function manifest(tcpIP: string, tcpPort: number, udpPort: number): string {
  return `apiVersion: v1
kind: Service
metadata: { name: web, namespace: default }
spec:
  clusterIP: ${SERVICE_IP}
  ports:
  - { name: tcp, port: 8080, protocol: TCP, targetPort: ${tcpPort} }
  - { name: udp, port: 8081, protocol: UDP, targetPort: ${udpPort} }
---
apiVersion: v1
kind: Endpoints
metadata: { name: web, namespace: default }
subsets:
- addresses: [{ ip: ${tcpIP} }]
  ports: [{ name: tcp, port: ${tcpPort}, protocol: TCP }]
- addresses: [{ ip: ${UDP_BACKEND} }]
  ports: [{ name: udp, port: ${udpPort}, protocol: UDP }]
`;
}

async function startUdpEcho(): Promise<number> {
  const socket = createSocket('udp4');
  socket.on('message', (m, r) => socket.send(`U:${m.toString()}`, r.port, r.address));
  await new Promise<void>((resolve) => socket.bind(0, UDP_BACKEND, resolve));
  udpBackend = socket;
  return socket.address().port;
}

async function start(): Promise<{ services: string; backendPort: number; udpPort: number }> {
  backends = await startBackends({ A, B });
  const udpPort = await startUdpEcho();
  const services = await runDaemon(manifest(A, backends.port, udpPort));
  await until(
    async () => (await ask(SERVICE_IP, 8080, 'ping', 1000)) === 'A:ping',
    'the Service to answer',
    START_MS,
  );
  return { services, backendPort: backends.port, udpPort };
}

/** Writes the manifest and a configuration, starts the daemon with 2 workers; returns the manifest path. */
async function runDaemon(
  text: string,
  extra = '',
  iptables = 'minSyncPeriod: 10ms',
  top: string[] = [],
): Promise<string> {
  const services = join(dir, 'services.yaml');
  await writeFile(services, text);
  const config = join(dir, 'config.yaml');
  await writeFile(
    config,
    daemonConfigText(SERVERS_IP, [
      `iptables: { ${iptables} }`,
      `userspaceProxy: { servicesFile: services.yaml, drainTimeout: 1m${extra} }`,
      ...top,
    ]),
  );
  proc = spawnDaemon(['--config', config, '--workers', '2']);
  const daemon = proc;
  await until(
    async () => (await workers()).length === 2,
    'both workers to be ready',
    START_MS,
  ).catch((err: Error) => {
    throw new Error(`${err.message}; the daemon said:\n${daemon.stderr()}`);
  });
  return services;
}

interface StatusWorker {
  worker: number;
  pid: number;
  connectionsTotal: number;
  connectionsActive: number;
}

async function workers(): Promise<StatusWorker[]> {
  try {
    const body = (await (await fetch(`${METRICS}/status.json`)).json()) as {
      workers?: StatusWorker[];
    };
    return body.workers ?? [];
  } catch {
    return [];
  }
}

async function metric(name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${METRICS}/metrics`)).text();
  return sampleValue(parseExposition(text), name, labels) ?? 0;
}

/** A process gone (a zombie left for a reaper counts as gone: it runs nothing). */
function gone(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z') ?? true;
  } catch {
    return true;
  }
}

const TCP = { service: 'default/web:tcp', protocol: 'TCP' };

describe('userspace-proxy --workers 2', () => {
  it('serves on both workers, sums their metrics, pushes edits to both, keeps a UDP flow on one, and drains both on SIGTERM', async () => {
    const { services, backendPort, udpPort } = await start();
    const health = await fetch(`http://${SERVERS_IP}:10256/healthz`);
    expect(health.status).toBe(200);

    // Connections spread over both workers; the aggregated counter is their sum.
    const before = await metric('userspace_proxy_connections_total', TCP);
    const n = 40;
    const answers = await Promise.all(
      Array.from({ length: n }, (_, i) => ask(SERVICE_IP, 8080, `c${i}`)),
    );
    expect(answers.filter((a) => a.startsWith('A:c'))).toHaveLength(n);
    expect((await metric('userspace_proxy_connections_total', TCP)) - before).toBe(n);
    const perWorker = [
      await metric('userspace_proxy_worker_connections_total', { worker: '1' }),
      await metric('userspace_proxy_worker_connections_total', { worker: '2' }),
    ];
    expect(perWorker[0]).toBeGreaterThan(0);
    expect(perWorker[1]).toBeGreaterThan(0);
    expect((perWorker[0] ?? 0) + (perWorker[1] ?? 0)).toBe(before + n);

    // One UDP flow: every datagram answered, one session (a flow split over workers makes two).
    const client = createSocket('udp4');
    const got: string[] = [];
    client.on('message', (m) => got.push(m.toString()));
    await new Promise<void>((resolve) => client.bind(0, '127.0.0.1', resolve));
    for (let i = 0; i < 20; i++) {
      client.send(`d${i}`, 8081, SERVICE_IP);
      await until(() => got.length > i, `the answer to datagram ${i}`);
    }
    client.close();
    expect(got[19]).toBe('U:d19');
    expect(await metric('userspace_proxy_udp_sessions_total', { protocol: 'UDP' })).toBe(1);

    // An edit of the services file reaches both workers: every connection now reaches B.
    await writeFile(services, manifest(B, backendPort, udpPort));
    await until(
      async () => {
        const batch = await Promise.all(
          Array.from({ length: 20 }, () => ask(SERVICE_IP, 8080, 'e')),
        );
        return batch.every((a) => a === 'B:e');
      },
      'every worker to follow the edit',
      START_MS,
    );
    // …and both workers carried a batch that only reached B.
    const counts = async () => [
      await metric('userspace_proxy_worker_connections_total', { worker: '1' }),
      await metric('userspace_proxy_worker_connections_total', { worker: '2' }),
    ];
    await until(async () => {
      const [one, two] = await counts();
      const batch = await Promise.all(Array.from({ length: 20 }, () => ask(SERVICE_IP, 8080, 'f')));
      expect(batch.every((a) => a === 'B:f')).toBe(true);
      const [one2, two2] = await counts();
      return (one2 ?? 0) > (one ?? 0) && (two2 ?? 0) > (two ?? 0);
    }, 'a batch served by both workers after the edit');

    // Open connections on both workers, then SIGTERM: both drain, refusing new clients.
    for (let i = 0; i < 60; i++) {
      const c = new Client(SERVICE_IP, 8080);
      clients.push(c);
      await c.roundTrip(`h${i}`, `B:h${i}`);
      const open = await workers();
      if (open.length === 2 && open.every((w) => w.connectionsActive > 0)) break;
    }
    expect((await workers()).every((w) => w.connectionsActive > 0)).toBe(true);
    const daemon = proc as DaemonProcess;
    daemon.child.kill('SIGTERM');
    await until(
      () => (daemon.stderr().match(/stopped accepting/g) ?? []).length >= 2,
      'both workers to stop accepting',
    );
    await until(
      async () => (await ask(SERVICE_IP, 8080, 'late', 1000)) === 'ECONNREFUSED',
      'the listeners to close',
    );
    for (const [i, c] of clients.entries()) await c.roundTrip(`s${i}`, `B:s${i}`);
    expect(daemon.child.exitCode).toBeNull();
    for (const c of clients) c.socket.end();
    expect(await daemon.exited).toBe(0);
    expect(daemon.stderr()).toMatch(/serving with 2 workers/);
    expect(daemon.stderr()).toMatch(/UDP, SCTP are served by worker 1 only/);
  }, 180_000);

  it("profiles each worker on the primary's metrics server with enableProfiling", async () => {
    backends = await startBackends({ A, B });
    await runDaemon(manifest(A, backends.port, await startUdpEcho()), '', undefined, [
      'enableProfiling: true',
    ]);
    // One CPU profiler per process: three at once succeed only if each ran where it was asked.
    const cpu = (q: string) => fetch(`${METRICS}/debug/pprof/profile?seconds=1${q}`);
    const answers = await Promise.all([cpu(''), cpu('&worker=1'), cpu('&worker=2')]);
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(answers[2]?.headers.get('content-disposition')).toMatch(/worker2-.*\.cpuprofile"$/);
    const profile = (await answers[2]?.json()) as { nodes: unknown[]; endTime: number };
    expect(profile.nodes.length).toBeGreaterThan(0);
    const heap = await fetch(`${METRICS}/debug/pprof/heap?worker=1`);
    expect(heap.status).toBe(200);
    expect(await heap.json()).toHaveProperty('head.callFrame');
    const bad = await fetch(`${METRICS}/debug/pprof/heap?worker=3`);
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain('from 1 to 2');

    // A hung worker: its heap profile is a 502 after WORKER_HEAP_PROFILE_WAIT_MS, not a connection
    // the metrics server's idle deadline closes.
    const pidOf = async (k: number) => (await workers()).find((w) => w.worker === k)?.pid ?? 0;
    const hung = await pidOf(1);
    process.kill(hung, 'SIGSTOP');
    try {
      const stuck = await fetch(`${METRICS}/debug/pprof/heap?worker=1`);
      expect(stuck.status).toBe(502);
      expect(await stuck.text()).toContain('did not answer');
    } finally {
      process.kill(hung, 'SIGCONT');
    }
    // A worker that dies mid-profile: the 502 comes when it dies, not after the 300 s window.
    const victim = await pidOf(2);
    const dying = fetch(`${METRICS}/debug/pprof/profile?seconds=300&worker=2`);
    // A second profile of worker 2 is refused as busy once the first runs there.
    await until(
      async () => (await fetch(`${METRICS}/debug/pprof/profile?seconds=1&worker=2`)).status === 409,
      "worker 2's profile to start",
    );
    process.kill(victim, 'SIGKILL');
    const died = await dying;
    expect(died.status).toBe(502);
    expect(await died.text()).toMatch(/worker 2 exited \(signal SIGKILL\)/);
  }, 120_000);

  it('restarts a worker that dies, and leaves no worker behind when the primary is killed', async () => {
    await start();
    const first = await workers();
    const victim = first.find((w) => w.worker === 1)?.pid ?? 0;
    process.kill(victim, 'SIGKILL');
    await until(
      async () => {
        const now = await workers();
        return now.length === 2 && !now.some((w) => w.pid === victim);
      },
      'worker 1 to be restarted',
      START_MS,
    );
    expect(await metric('userspace_proxy_worker_restarts_total', { worker: '1' })).toBe(1);
    expect(proc?.stderr()).toMatch(/worker 1 \(pid \d+\) died \(signal SIGKILL\)/);
    const answers = await Promise.all(Array.from({ length: 10 }, () => ask(SERVICE_IP, 8080, 'r')));
    expect(answers.every((a) => a === 'A:r')).toBe(true);

    const pids = (await workers()).map((w) => w.pid);
    expect(pids).toHaveLength(2);
    proc?.child.kill('SIGKILL');
    await proc?.exited;
    await until(() => pids.every(gone), 'the workers to exit after the primary', 30_000);
  }, 180_000);

  it('keeps an idled Service in one worker: its hold limit counts every client once', async () => {
    backends = await startBackends({ A });
    const idled = (endpoints: string) => `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
  annotations: { idling.alpha.openshift.io/idled-at: "2026-12-01T08:00:00Z" }
spec:
  clusterIP: ${SERVICE_IP}
  ports:
  - { name: tcp, port: 8080, protocol: TCP, targetPort: ${backends?.port} }
---
apiVersion: v1
kind: Endpoints
metadata: { name: web, namespace: default }
subsets: ${endpoints}
`;
    const services = await runDaemon(idled('[]'), ', idling: true, idlingMaxHeldPerPort: 2');
    // Both workers ready is not the Service listening: worker 1 opens it after its first sync, and
    // a client that came first was refused (seen once in CI).
    await until(
      async () => (await metric('userspace_proxy_service_ports')) >= 1,
      'the idled Service to listen',
      START_MS,
    );
    const held = () =>
      metric('userspace_proxy_idler_held_connections', { service: 'default/web:tcp' });
    for (let i = 0; i < 3; i++) {
      const c = new Client(SERVICE_IP, 8080);
      clients.push(c);
      c.socket.write(`h${i}`);
      await until(
        async () =>
          (await held()) === Math.min(i + 1, 2) && (i < 2 || (clients[0]?.closed ?? false)),
        `client ${i} to be held`,
        START_MS,
      ).catch((err: Error) => {
        const state = `closed: ${clients.map((k) => k.closed).join(', ')}`;
        throw new Error(`${err.message} (${state}); the daemon said:\n${proc?.stderr()}`);
      });
    }
    // Two held in all: the third client made the one worker close the oldest.
    expect(await held()).toBe(2);
    expect(clients[0]?.closed).toBe(true);
    const subsets = `[{ addresses: [{ ip: ${A} }], ports: [{ name: tcp, port: ${backends.port}, protocol: TCP }] }]`;
    await writeFile(services, idled(subsets));
    for (const [i, c] of clients.slice(1).entries()) {
      await until(() => c.received.includes(`A:h${i + 1}`), `held client ${i + 1} handed over`);
    }
    expect(proc?.stderr()).toMatch(/UDP, SCTP and idled Services are served by worker 1 only/);
  }, 180_000);

  it('answers /healthz 503 while one worker has not applied a change, and 200 once it has', async () => {
    backends = await startBackends({ A, B });
    const udpPort = await startUdpEcho();
    const services = await runDaemon(
      manifest(A, backends.port, udpPort),
      '',
      'minSyncPeriod: 10ms, syncPeriod: 1s',
    );
    const healthz = async () => (await fetch(`http://${SERVERS_IP}:10256/healthz`)).status;
    await until(async () => (await healthz()) === 200, 'the workers to sync', START_MS);
    const frozen = (await workers()).find((w) => w.worker === 2)?.pid ?? 0;
    process.kill(frozen, 'SIGSTOP');
    try {
      // A Service change (endpoint changes need no sync): annotated.
      const changed = manifest(A, backends.port, udpPort).replace(
        'metadata: { name: web, namespace: default }\nspec',
        'metadata: { name: web, namespace: default, annotations: { a: b } }\nspec',
      );
      await writeFile(services, changed);
      // 2 × syncPeriod after the change, with worker 2 unable to sync.
      await until(async () => (await healthz()) === 503, '/healthz to turn 503', 20_000);
    } finally {
      process.kill(frozen, 'SIGCONT');
    }
    await until(async () => (await healthz()) === 200, '/healthz to recover', 20_000);
  }, 180_000);
});
