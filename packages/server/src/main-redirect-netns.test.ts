import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  captureRules,
  conntrackFlows,
  firstLine,
  kubeRules,
  type Netns,
  NetnsSandbox,
  netnsSupport,
  runNode,
  TCP_ECHO_SERVER,
  TCP_PROBE,
  UDP_ECHO_SERVER,
  UDP_PROBE,
} from '../../linux/src/test-support/netns.js';
import { REPO_ROOT } from './test-support/daemon-process.js';
import { until } from './test-support/wait.js';

/**
 * The real `userspace-proxy` process in userspace (redirect) mode, run with `ip netns exec` in
 * namespace A (the "node", with the echo backends), fed by a manifest file, and reached from
 * namespace B (another host whose route to the Service range goes through A): the iptables rules it
 * installs, a live manifest edit (rules and conntrack flows of a removed UDP port go), SIGTERM, and
 * `--cleanup`. The kernel is read directly (iptables-save, conntrack -L).
 */
const support = netnsSupport(['iptables', 'iptables-save', 'conntrack']);
const why = support.ok ? '' : ` (skipped: ${support.reason})`;

const MAIN = fileURLToPath(new URL('./main.ts', import.meta.url));
const A_IP = '10.204.0.1';
const B_IP = '10.204.0.2';
const CLUSTER_IP = '10.96.50.50';
const NODE_PORT = 30_090;

/** The daemon's command line inside `ns`, from source as the bin runs it in development. */
function daemonArgv(args: string[]): string[] {
  return [
    process.execPath,
    '--conditions=@userspace-proxy/source',
    '--import',
    'tsx',
    MAIN,
    ...args,
  ];
}

/** A NodePort Service with a TCP port and, unless `udp` is false, a UDP port; endpoints on A. */
function manifest(tcpPort: number, udpPort: number, udp: boolean): string {
  const servicePorts = [
    `{ name: http, port: 80, protocol: TCP, targetPort: ${tcpPort}, nodePort: ${NODE_PORT} }`,
    ...(udp ? [`{ name: dns, port: 53, protocol: UDP, targetPort: ${udpPort} }`] : []),
  ];
  const slicePorts = [
    `{ name: http, port: ${tcpPort}, protocol: TCP }`,
    ...(udp ? [`{ name: dns, port: ${udpPort}, protocol: UDP }`] : []),
  ];
  const list = (items: string[]) => items.map((item) => `  - ${item}\n`).join('');
  return `apiVersion: v1
kind: Service
metadata: { name: web, namespace: default }
spec:
  type: NodePort
  clusterIP: ${CLUSTER_IP}
  ports:
${list(servicePorts)}---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: { kubernetes.io/service-name: web }
addressType: IPv4
ports:
${list(slicePorts)}endpoints:
  - addresses: ["${A_IP}"]
    conditions: { ready: true }
`;
}

/** Resolves with a child's exit code (or signal name). */
function exited(child: ChildProcess): Promise<number | string> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve(child.exitCode ?? child.signalCode ?? -1);
  }
  return new Promise((resolve) =>
    child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)),
  );
}

/** Collects a child's stderr (its log), for failure messages. */
function collectStderr(child: ChildProcess): () => string {
  let text = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    text = (text + chunk.toString()).slice(-20_000);
  });
  return () => text;
}

describe.skipIf(!support.ok)(
  `userspace-proxy --proxy-mode userspace in a network namespace${why}`,
  () => {
    const sandbox = new NetnsSandbox();
    let a: Netns;
    let b: Netns;
    let dir: string;
    let file: string;
    let tcpPort: number;
    let udpPort: number;
    let daemon: ChildProcess;
    let log: () => string;

    const tcp = (host: string, port: number, text: string, ms = 5_000) =>
      runNode(b, TCP_PROBE, [host, String(port), text, String(ms)]);
    const udp = async (host: string, port: number, text: string, ms = 5_000) => {
      const out = await runNode(b, UDP_PROBE, [host, String(port), text, String(ms)]);
      return out === 'TIMEOUT' ? out : (JSON.parse(out) as { from: string; data: string });
    };
    /** Replaces the manifest in one step, as an editor saving through a temporary file does. */
    const writeManifest = async (text: string) => {
      await writeFile(`${file}.tmp`, text);
      await rename(`${file}.tmp`, file);
    };

    beforeAll(async () => {
      ({ node: a, client: b } = await sandbox.nodeAndClient({
        addressA: `${A_IP}/24`,
        addressB: `${B_IP}/24`,
        serviceRange: '10.96.0.0/16',
      }));
      tcpPort = Number(await firstLine(sandbox.spawnNode(a, TCP_ECHO_SERVER, [A_IP])));
      udpPort = Number(await firstLine(sandbox.spawnNode(a, UDP_ECHO_SERVER, [A_IP])));
      dir = await mkdtemp(join(tmpdir(), 'up-redirect-'));
      file = join(dir, 'services.yaml');
      await writeManifest(manifest(tcpPort, udpPort, true));
      daemon = sandbox.spawnIn(
        a,
        daemonArgv([
          '--proxy-mode',
          'userspace',
          '--services-file',
          file,
          '--min-sync-period',
          '10ms',
          '--healthz-bind-address',
          '127.0.0.1:10256',
        ]),
        { cwd: REPO_ROOT, env: { ...process.env, KUBERNETES_SERVICE_HOST: '' } },
      );
      log = collectStderr(daemon);
      await until(
        async () => (await tcp(CLUSTER_IP, 80, 'ping', 1_000)) === 'echo:ping',
        'the daemon to serve the Service from B',
        25_000,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\n${log()}`);
      });
    }, 30_000);
    afterAll(async () => {
      await sandbox.cleanup();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it('captures the cluster IP and the node port with iptables rules, and serves B through them', async () => {
      // The TCP port answering says its rules are in; the UDP port's are installed by its own
      // socket's open, which may finish a moment later.
      await until(
        async () => captureRules(await kubeRules(a), CLUSTER_IP, 'udp', 53).length > 0,
        'the UDP port capture rules',
        10_000,
      );
      const rules = await kubeRules(a);
      const clusterTcp = captureRules(rules, CLUSTER_IP, 'tcp', 80);
      const nodePort = captureRules(rules, null, 'tcp', NODE_PORT).filter(
        (l) => !l.startsWith('-A KUBE-NODEPORT-NON-LOCAL'),
      );
      expect(clusterTcp.some((l) => l.startsWith('-A KUBE-PORTALS-CONTAINER '))).toBe(true);
      expect(nodePort.some((l) => l.startsWith('-A KUBE-NODEPORT-CONTAINER '))).toBe(true);
      expect(captureRules(rules, CLUSTER_IP, 'udp', 53)).not.toEqual([]);
      // The TCP cluster IP and the node port go to one proxy port.
      const proxyPorts = new Set([...clusterTcp, ...nodePort].map((l) => l.replace(/.*\D/, '')));
      expect(proxyPorts.size).toBe(1);

      const answers = await Promise.all([
        tcp(CLUSTER_IP, 80, 'a'),
        tcp(A_IP, NODE_PORT, 'b'),
        udp(CLUSTER_IP, 53, 'c'),
      ]);
      expect(answers).toEqual(['echo:a', 'echo:b', { from: `${CLUSTER_IP}:53`, data: 'echo:c' }]);
    });

    it('applies a manifest edit: a removed UDP port loses its rules and its conntrack flows', async () => {
      expect(await udp(CLUSTER_IP, 53, 'before')).toEqual({
        from: `${CLUSTER_IP}:53`,
        data: 'echo:before',
      });
      await until(
        async () => (await conntrackFlows(a, CLUSTER_IP)).includes(`dst=${CLUSTER_IP} `),
        'the UDP flow to be tracked',
      );

      await writeManifest(manifest(tcpPort, udpPort, false));
      await until(
        async () => captureRules(await kubeRules(a), CLUSTER_IP, 'udp', 53).length === 0,
        'the UDP rules to go',
      );
      // The flows are cleared at the end of the same sync.
      await until(async () => (await conntrackFlows(a, CLUSTER_IP)) === '', 'the UDP flows to go');
      const [gone, kept] = await Promise.all([
        udp(CLUSTER_IP, 53, 'after', 1_500),
        tcp(CLUSTER_IP, 80, 'kept'),
      ]);
      expect(gone).toBe('TIMEOUT');
      expect(kept).toBe('echo:kept');
    });

    it('exits 0 on SIGTERM with no portal rule left, and --cleanup removes the chains', async () => {
      daemon.kill('SIGTERM');
      expect(await exited(daemon), log()).toBe(0);
      const rules = await kubeRules(a);
      expect(rules.filter((l) => l.startsWith('-A KUBE-'))).toEqual([]);
      expect(rules).toContain(':KUBE-PORTALS-CONTAINER -');
      expect(await tcp(A_IP, NODE_PORT, 'late')).toBe('ECONNREFUSED');

      const cleanup = sandbox.spawnIn(a, daemonArgv(['--cleanup']), { cwd: REPO_ROOT });
      const cleanupLog = collectStderr(cleanup);
      expect(await exited(cleanup), cleanupLog()).toBe(0);
      expect(await kubeRules(a)).toEqual([]);
    });
  },
);
