import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { FakeApiServer } from '../../kubernetes/src/test-support/fake-apiserver.js';
import type { StoredObject } from '../../kubernetes/src/test-support/fake-store.js';
import { ask, type Backends, Client, startBackends } from './test-support/backends.js';
import { daemonConfigText } from './test-support/config-file.js';
import {
  type DaemonProcess,
  killDaemon,
  REPO_ROOT,
  spawnDaemon,
} from './test-support/daemon-process.js';
import { loopbackBlock } from './test-support/loopback.js';
import { until } from './test-support/wait.js';

// End to end on a cluster: the real `userspace-proxy` process following the in-process fake API
// server (the real @kubernetes/client-node inside the daemon), as a DaemonSet pod would follow the
// real one. Loopback addresses of this file only.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const WEB_IP = `${NET}1`;
const API_IP = `${NET}5`;
const A = `${NET}2`;
const B = `${NET}3`;
const SERVERS_IP = `${NET}4`;
const NODE_IP = `${NET}9`;
const NODE_PORT = 30_877;
const NODE = 'e2e-node';

let dir: string;
let server: FakeApiServer;
let backends: Backends;
let proc: DaemonProcess | undefined;
const clients: Client[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-cluster-'));
  server = await FakeApiServer.start();
  backends = await startBackends({ A, B });
});

afterEach(async () => {
  for (const c of clients.splice(0)) c.socket.destroy();
  await killDaemon(proc);
  proc = undefined;
  await server.close();
  await backends.close();
  await rm(dir, { recursive: true, force: true });
});

function service(name: string, ip: string, nodePort?: number): StoredObject {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: 'default' },
    spec: {
      type: nodePort ? 'NodePort' : 'ClusterIP',
      clusterIP: ip,
      clusterIPs: [ip],
      ports: [{ name: 'tcp', protocol: 'TCP', port: 8080, ...(nodePort ? { nodePort } : {}) }],
    },
  };
}

function slice(serviceName: string, ips: string[]): StoredObject {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `${serviceName}-1`,
      namespace: 'default',
      labels: { 'kubernetes.io/service-name': serviceName },
    },
    addressType: 'IPv4',
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } })),
    ports: [{ name: 'tcp', protocol: 'TCP', port: backends.port }],
  };
}

function nodeObject(extra: Record<string, unknown> = {}): StoredObject {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: NODE, ...extra },
    status: { addresses: [{ type: 'InternalIP', address: NODE_IP }] },
  };
}

async function writeConfig(extra: string[] = []): Promise<string> {
  const file = join(dir, 'config.yaml');
  await writeFile(
    file,
    daemonConfigText(SERVERS_IP, [
      'iptables: { minSyncPeriod: 10ms }',
      'nodePortAddresses: [primary]',
      'userspaceProxy: { drainTimeout: 10s }',
      ...extra,
    ]),
  );
  return file;
}

const status = async (path: string) => (await fetch(`http://${SERVERS_IP}:10256${path}`)).status;
/** Waits (30 s at most) for `check`, failing at once, with the daemon's log, if the daemon exits. */
async function serving(check: () => Promise<boolean>, what: string): Promise<void> {
  try {
    await until(
      async () => {
        if (proc && proc.child.exitCode !== null) throw new Error('the daemon exited');
        return check();
      },
      what,
      30_000,
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; the daemon's log:\n${proc?.stderr()}`);
  }
}

/** Waits until a new connection to `ip` reaches `backend`. */
const reaches = (ip: string, backend: string) =>
  until(
    async () => (await ask(ip, 8080, 'probe', 1000)) === `${backend}:probe`,
    `${ip} → ${backend}`,
  );

/** The ClusterRole of deploy/rbac.yaml as "group/resource/verb" strings. */
async function grantedByDeploy(): Promise<Set<string>> {
  const text = await readFile(join(REPO_ROOT, 'deploy/rbac.yaml'), 'utf8');
  type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] };
  const role = parseAllDocuments(text)
    .map((d) => d.toJS() as { kind?: string; rules?: Rule[] })
    .find((d) => d.kind === 'ClusterRole');
  const granted = new Set<string>();
  for (const rule of role?.rules ?? [])
    for (const group of rule.apiGroups)
      for (const resource of rule.resources)
        for (const verb of rule.verbs) granted.add(`${group}/${resource}/${verb}`);
  return granted;
}

describe('userspace-proxy --master (the process, against an API server)', () => {
  it('syncs, proxies, follows adds, updates and deletes, and keeps serving without the API server', async () => {
    server.store.create('nodes', nodeObject());
    server.store.create('services', service('web', WEB_IP, NODE_PORT));
    server.store.create('endpointslices', slice('web', [A]));
    proc = spawnDaemon([
      '--config',
      await writeConfig(),
      '--master',
      server.url,
      '--hostname-override',
      ' E2E-Node ',
      '--logging-format',
      'json',
    ]);

    // Initial sync: the Service, and its node port on the Node's InternalIP ("primary").
    await serving(async () => (await ask(WEB_IP, 8080, 'one', 1000)) === 'A:one', 'web');
    expect(await ask(NODE_IP, NODE_PORT, 'np')).toBe('A:np');
    const starting = server.store
      .list('events')
      .find((e) => (e as { reason?: string }).reason === 'Starting');
    expect(starting).toMatchObject({
      involvedObject: { kind: 'Node', name: NODE },
      type: 'Normal',
      source: { component: 'userspace-proxy', host: NODE },
    });
    expect(await status('/healthz')).toBe(200);
    const held = new Client(WEB_IP, 8080);
    clients.push(held);
    await held.roundTrip('held', 'A:held');

    // Add, update, delete.
    server.store.create('services', service('api', API_IP));
    server.store.create('endpointslices', slice('api', [B]));
    await reaches(API_IP, 'B');
    server.store.update('endpointslices', slice('web', [B]));
    await reaches(WEB_IP, 'B');
    await held.roundTrip('still', 'A:still'); // an established connection keeps its endpoint
    server.store.delete('services', 'default', 'api');
    await until(async () => (await ask(API_IP, 8080, 'x', 1000)) === 'ECONNREFUSED', 'delete');

    // The API server goes away: the last known state keeps serving; nothing was queued, so
    // /healthz and /livez stay 200 (kube-proxy's rule), and the Node stays eligible.
    const port = Number(new URL(server.url).port);
    const store = server.store;
    const requests = [...server.requests];
    await server.close();
    await until(() => proc?.stderr().includes('keeping the last known state') ?? false, 'a retry');
    expect(await ask(WEB_IP, 8080, 'gone')).toBe('B:gone');
    expect(await ask(NODE_IP, NODE_PORT, 'gone')).toBe('B:gone');
    expect(await status('/healthz')).toBe(200);
    expect(await status('/livez')).toBe(200);
    await held.roundTrip('through', 'A:through');

    // It comes back: the watches resume and new changes arrive.
    server = await FakeApiServer.startOn(port, store);
    server.store.update('endpointslices', slice('web', [A]));
    await reaches(WEB_IP, 'A');

    // The Node is being deleted: /healthz (for load balancers) says so, /livez does not.
    server.store.update('nodes', nodeObject({ deletionTimestamp: new Date().toISOString() }));
    await until(async () => (await status('/healthz')) === 503, '/healthz 503');
    expect(await status('/livez')).toBe(200);

    // Every call the daemon made is allowed by deploy/rbac.yaml.
    const granted = await grantedByDeploy();
    const used = new Set(
      [...requests, ...server.requests].map((r) => `${r.group}/${r.resource}/${r.verb}`),
    );
    expect(used).toContain('/events/create');
    expect([...used].filter((u) => !granted.has(u))).toEqual([]);

    held.socket.end();
    proc.child.kill('SIGTERM');
    expect(await proc.exited).toBe(0);
  }, 90_000);

  it('--kubeconfig (here from the file) reaches a server that wants its token; a missing one fails', async () => {
    const secure = await FakeApiServer.start({ token: 's3cret' });
    try {
      secure.store.create('nodes', nodeObject());
      secure.store.create('services', service('web', WEB_IP));
      secure.store.create('endpointslices', slice('web', [A]));
      await writeFile(join(dir, 'token'), 's3cret\n');
      const kubeconfig = join(dir, 'kubeconfig.yaml');
      await writeFile(
        kubeconfig,
        [
          'apiVersion: v1',
          'kind: Config',
          'clusters:',
          `- name: c\n  cluster: { server: "${secure.url}", insecure-skip-tls-verify: true }`,
          `users:\n- name: u\n  user: { tokenFile: "${join(dir, 'token')}" }`,
          'contexts:\n- name: x\n  context: { cluster: c, user: u }',
          'current-context: x',
          '',
        ].join('\n'),
      );
      const config = await writeConfig([`clientConnection: { kubeconfig: ${kubeconfig} }`]);
      proc = spawnDaemon(['--config', config, '--hostname-override', NODE]);
      await serving(async () => (await ask(WEB_IP, 8080, 'k', 1000)) === 'A:k', 'web');
      expect(secure.requests.every((r) => r.authorization === 'Bearer s3cret')).toBe(true);
      proc.child.kill('SIGTERM');
      expect(await proc.exited).toBe(0);
    } finally {
      await secure.close();
    }

    proc = spawnDaemon([
      '--kubeconfig',
      join(dir, 'missing.yaml'),
      '--healthz-bind-address',
      SERVERS_IP,
    ]);
    expect(await proc.exited).toBe(1);
    expect(proc.stderr()).toContain(`file ${join(dir, 'missing.yaml')} does not exist`);
  }, 60_000);
});
