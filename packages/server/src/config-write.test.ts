import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveConfiguration } from './config-load.js';
import { defaultConfiguration, type KubeProxyConfiguration } from './config-schema.js';
import { rebasePathFields } from './config-write.js';
import { runCommand } from './run.js';

// `--write-config-to` then `--config` must give back the configuration that was written, every
// field of it, including the path fields, which the two read relative to different directories.

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-write-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const quiet = {
  stdout: () => {},
  stderr: () => {},
  env: {},
  log: () => {},
  onSignal: () => () => {},
};

/** Every leaf of a plain object as a dotted path; arrays are leaves. */
function leaves(value: unknown, prefix = ''): [string, unknown][] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return [[prefix, value]];
  const entries = Object.entries(value);
  if (entries.length === 0) return [[prefix, value]];
  return entries.flatMap(([k, v]) => leaves(v, prefix ? `${prefix}.${k}` : k));
}

/** A valid configuration file in which every field differs from its default. */
const EVERY_FIELD = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
featureGates: { SomeGate: true }
clientConnection:
  kubeconfig: kube/config.conf
  acceptContentTypes: application/json
  contentType: application/json
  qps: 7
  burst: 11
logging: { format: json, verbosity: 2, flushFrequency: 5s, vmodule: [], options: { json: {} } }
hostnameOverride: node-x
bindAddress: 10.1.2.3
healthzBindAddress: 127.0.0.9:10300
metricsBindAddress: 127.0.0.9:10301
bindAddressHardFail: true
enableProfiling: true
showHiddenMetricsForVersion: "0.0"
mode: userspace
iptables: { masqueradeBit: 13, masqueradeAll: true, localhostNodePorts: false, syncPeriod: 45s, minSyncPeriod: 2s }
conntrack:
  maxPerCore: 1000
  min: 2000
  tcpEstablishedTimeout: 2h
  tcpCloseWaitTimeout: 30m
  tcpBeLiberal: true
  udpTimeout: 40s
  udpStreamTimeout: 2m
ipvs: { scheduler: rr }
nftables: { syncPeriod: 30s }
winkernel: { networkName: x }
detectLocalMode: ClusterCIDR
detectLocal: { bridgeInterface: br0, interfaceNamePrefix: veth }
clusterCIDR: 10.0.0.0/8
nodePortAddresses: [127.0.0.0/8]
oomScoreAdj: -500
configSyncPeriod: 5m
portRange: 30000-31000
udpIdleTimeout: 20s
windowsRunAsService: true
userspaceProxy:
  servicesFile: manifests/services.yaml
  drainTimeout: 3s
  maxConnectionsPerPort: 100
  maxUdpSessionsPerPort: 50
  tcpIdleTimeout: 1m
  tcpHalfCloseTimeout: 10s
  tcpKeepAlive: 5s
  dialTimeouts: [100ms, 200ms]
  udpBufferBytes: 65536
  nodeWaitTimeout: 7s
  idling: true
  idlingMaxHeldPerPort: 4
  idlingHoldTimeout: 30s
  sctpEncapsulationPort: 19899
  sctpMaxAssociationsPerPort: 64
  sctpMaxAssociationsPerAddress: 8
  sctpMtu: 9000
  sctpTransport: raw
  workers: 3
  listLimits:
    pageSize: 100
    maxPages: 20
    maxItems: 2000
    maxPageBytes: 1048576
    maxListBytes: 8388608
    requestTimeout: 10s
    requestDeadline: 30s
`;

async function readBack(path: string): Promise<KubeProxyConfiguration> {
  const r = await resolveConfiguration({
    configFile: path,
    flags: {},
    explicit: new Set(),
    configFlags: new Set(),
  });
  expect(r.errors).toEqual([]);
  return r.config as KubeProxyConfiguration;
}

describe('--write-config-to and --config', () => {
  it('round-trip every field, the path fields naming the same files from anywhere', async () => {
    await mkdir(join(dir, 'in'));
    await mkdir(join(dir, 'out'));
    const source = join(dir, 'in', 'config.yaml');
    await writeFile(source, EVERY_FIELD);
    const original = await readBack(source);
    // The test covers every field: each one differs from its default.
    const defaults = new Map(
      leaves(defaultConfiguration()).map(([k, v]) => [k, JSON.stringify(v)]),
    );
    // dataPath "native" needs workers 1, and this file sets 3: its round trip is the next test.
    const same = leaves(original).filter(
      ([path, value]) =>
        !['apiVersion', 'kind', 'userspaceProxy.dataPath'].includes(path) &&
        defaults.get(path) === JSON.stringify(value),
    );
    expect(same).toEqual([]);

    const out = join(dir, 'out', 'effective.yaml');
    expect(await runCommand(['--config', source, '--write-config-to', out], quiet)).toBe(0);
    const back = await readBack(out);
    expect(resolve(back.userspaceProxy.servicesFile)).toBe(join(dir, 'in/manifests/services.yaml'));
    expect(back.clientConnection.kubeconfig).toBe(resolve('kube/config.conf'));
    const norm = (c: KubeProxyConfiguration) => ({
      ...c,
      clientConnection: {
        ...c.clientConnection,
        kubeconfig: resolve(c.clientConnection.kubeconfig),
      },
      userspaceProxy: { ...c.userspaceProxy, servicesFile: resolve(c.userspaceProxy.servicesFile) },
    });
    expect(norm(back)).toEqual(norm(original));
  });

  it('round-trips dataPath native (with one worker)', async () => {
    const source = join(dir, 'native.yaml');
    await writeFile(
      source,
      'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nuserspaceProxy:\n  dataPath: native\n',
    );
    expect((await readBack(source)).userspaceProxy.dataPath).toBe('native');
    const out = join(dir, 'native-effective.yaml');
    expect(await runCommand(['--config', source, '--write-config-to', out], quiet)).toBe(0);
    expect((await readBack(out)).userspaceProxy.dataPath).toBe('native');
  });

  it('writes a --services-file given relative to the working directory so that --config finds it', async () => {
    const out = join(dir, 'effective.yaml');
    const rel = relative(process.cwd(), join(dir, 'm', 'services.yaml'));
    expect(
      await runCommand(
        ['--write-config-to', out, '--services-file', rel, '--kubeconfig', 'k.conf'],
        quiet,
      ),
    ).toBe(0);
    const text = await readFile(out, 'utf8');
    expect(text).toContain('servicesFile: m/services.yaml'); // beside the file: kept relative
    const back = await readBack(out);
    expect(back.userspaceProxy.servicesFile).toBe(join(dir, 'm', 'services.yaml'));
    expect(back.clientConnection.kubeconfig).toBe(resolve('k.conf'));
  });

  it("writes a manifest outside the file's directory as an absolute path", () => {
    const config = defaultConfiguration({ userspaceProxy: { servicesFile: '../s.yaml' } });
    const rebased = rebasePathFields(config, { writtenTo: '/etc/up/config.yaml', cwd: '/srv/a' });
    expect(rebased.userspaceProxy.servicesFile).toBe('/srv/s.yaml');
    const inside = rebasePathFields(config, { writtenTo: '/srv/c.yaml', cwd: '/srv/a' });
    expect(inside.userspaceProxy.servicesFile).toBe('s.yaml');
    expect(rebasePathFields(config, {})).toBe(config);
  });
});
