/**
 * Builds the image with deploy/image/build.sh (Debian packages alone: mmdebstrap, the Node binary
 * running this test, the deployed daemon, packed as an OCI layout), checks it with the tools Debian
 * has (umoci, skopeo), and starts the daemon INSIDE it: the layout is unpacked by umoci into a root
 * and its entry point runs there as the image's user, with its own mount and pid namespaces, as an
 * engine would run it (on the host network, as the DaemonSet does). A Service from a services file
 * is then proxied on loopback, and /healthz answers.
 *
 * Needs root, Linux, mmdebstrap, umoci, skopeo, unshare and a reachable Debian mirror; it is skipped
 * with the reason otherwise (.ci/run installs the tools). The Debian root file system is cached in
 * the temp directory by its inputs, so a second run on the same machine skips mmdebstrap.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildWorkspace,
  describeResult,
  REPO_ROOT,
  runCommand,
} from '../../packages/core/src/test-support/pack-workspace.js';
import { waitFor } from '../../packages/core/src/test-support/wait-for.js';
import { Client, startBackends } from '../../packages/server/src/test-support/backends.js';
import { httpStatus } from '../../packages/server/src/test-support/http-get.js';
import { serviceWithSlice } from '../../packages/server/src/test-support/manifests.js';

const MIRROR = process.env.USERSPACE_PROXY_IMAGE_MIRROR ?? 'http://deb.debian.org/debian';
const TAG = '0.1.0';
const TOOLS = { mmdebstrap: 'mmdebstrap', umoci: 'umoci', skopeo: 'skopeo', unshare: 'util-linux' };

/** Why the image cannot be built here, or undefined when it can. */
async function skipReason(): Promise<string | undefined> {
  if (process.platform !== 'linux') return 'the image is built on Linux only';
  if (process.getuid?.() !== 0) return 'building the image needs root (mmdebstrap, umoci unpack)';
  if (!process.version.startsWith('v20.')) return `the image carries this Node, ${process.version}`;
  const missing = Object.entries(TOOLS).filter(
    ([tool]) => spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0,
  );
  if (missing.length > 0)
    return `missing ${missing.map(([t]) => t).join(', ')}: apt-get install ${missing.map(([, p]) => p).join(' ')}`;
  try {
    const res = await fetch(`${MIRROR}/dists/bookworm/InRelease`, {
      method: 'HEAD',
      signal: AbortSignal.timeout(10_000),
    });
    if (!res.ok) return `the Debian mirror ${MIRROR} answered ${res.status}`;
  } catch (err) {
    return `the Debian mirror ${MIRROR} is unreachable: ${(err as Error).message}`;
  }
  return undefined;
}

const reason = await skipReason();
if (reason !== undefined) console.warn(`deploy/image/image.test.ts skipped: ${reason}`);

/** A random 127.x.y.1 base, so parallel runs on one host do not collide. */
function loopbackBase(): string {
  const r = () => 1 + Math.floor(Math.random() * 250);
  return `127.${r()}.${r()}`;
}

/** The runtime spec umoci wrote for the unpacked image: what an engine would run. */
interface RuntimeSpec {
  process: { args: string[]; env: string[]; cwd: string; user: { uid: number; gid: number } };
}

/**
 * The instruction lines of the Containerfile's last stage, as `INSTRUCTION rest`, so the test can
 * compare them with the config oci-pack.mjs writes.
 */
function containerfileFinalStage(): Map<string, string[]> {
  const text = readFileSync(join(REPO_ROOT, 'deploy/image/Containerfile'), 'utf8');
  const lines = text.replace(/\\\n/g, ' ').split('\n');
  const stages: string[][] = [];
  for (const line of lines) {
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    if (/^FROM\s/i.test(trimmed)) stages.push([]);
    stages.at(-1)?.push(trimmed);
  }
  const result = new Map<string, string[]>();
  for (const line of stages.at(-1) ?? []) {
    const [instruction = '', ...rest] = line.split(/\s+/);
    const key = instruction.toUpperCase();
    result.set(key, [...(result.get(key) ?? []), rest.join(' ')]);
  }
  return result;
}

describe.skipIf(reason !== undefined)('the image built by deploy/image/build.sh', () => {
  let work: string;
  let layout: string;
  let archive: string;
  let spec: RuntimeSpec;
  let rootfs: string;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'up-image-'));
    const cache = join(tmpdir(), 'userspace-proxy-image-cache');
    await buildWorkspace();
    const out = join(work, 'out');
    const built = await runCommand(
      'bash',
      ['deploy/image/build.sh', '--skip-build', '--out', out, '--cache', cache, '--tag', TAG],
      { timeoutMs: 900_000 },
    );
    if (built.code !== 0) throw new Error(describeResult('deploy/image/build.sh', built));
    layout = join(out, `userspace-proxy-${TAG}.oci`);
    archive = join(out, `userspace-proxy-${TAG}.oci.tar`);
    const bundle = join(work, 'bundle');
    const unpacked = await runCommand('umoci', ['unpack', '--image', `${layout}:${TAG}`, bundle], {
      timeoutMs: 300_000,
    });
    if (unpacked.code !== 0) throw new Error(describeResult('umoci unpack', unpacked));
    spec = JSON.parse(await readFile(join(bundle, 'config.json'), 'utf8')) as RuntimeSpec;
    rootfs = join(bundle, 'rootfs');
  }, 1_200_000);

  afterAll(async () => {
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('is an OCI layout skopeo and umoci read, with the Containerfile’s entry point, user and env', async () => {
    expect(existsSync(archive)).toBe(true);
    const stat = await runCommand('umoci', ['stat', '--image', `${layout}:${TAG}`]);
    expect(stat.code, describeResult('umoci stat', stat)).toBe(0);
    expect(stat.stdout).toContain('Debian bookworm minbase');
    const inspected = await runCommand('skopeo', ['inspect', '--config', `oci:${layout}:${TAG}`]);
    expect(inspected.code, describeResult('skopeo inspect', inspected)).toBe(0);
    const image = JSON.parse(inspected.stdout) as {
      architecture: string;
      os: string;
      config: { User: string; Entrypoint: string[]; Cmd: string[]; Env: string[] };
    };
    expect(image.os).toBe('linux');
    const index = JSON.parse(await readFile(join(layout, 'index.json'), 'utf8'));
    expect(index.manifests[0].annotations['io.containerd.image.name']).toBe(
      `docker.io/library/userspace-proxy:${TAG}`,
    );

    const stage = containerfileFinalStage();
    expect(stage.get('USER')).toEqual([image.config.User]);
    expect(stage.get('ENTRYPOINT')).toEqual([JSON.stringify(image.config.Entrypoint)]);
    expect(stage.get('CMD')).toEqual([JSON.stringify(image.config.Cmd)]);
    expect(stage.get('ENV')).toEqual(image.config.Env);
    expect(image.config.User).toBe('65532:65532');
  });

  it('ships the cluster client as one bundle, with its manifest and the bundled packages’ licenses', () => {
    const dist = join(rootfs, 'opt/userspace-proxy/dist');
    expect(existsSync(join(dist, 'kubernetes.bundle.js'))).toBe(true);
    const manifest = JSON.parse(readFileSync(join(dist, 'kubernetes.bundle.json'), 'utf8')) as {
      digest?: unknown;
    };
    expect(typeof manifest.digest).toBe('string');
    expect(readFileSync(join(dist, 'kubernetes.bundle.licenses.txt'), 'utf8')).toContain(
      '@kubernetes/client-node',
    );
  });

  it('carries iptables and conntrack, which work in a network namespace as root', async () => {
    const script =
      'iptables -w 5 -t nat -N KUBE-IMAGE-TEST && iptables -w 5 -t nat -S KUBE-IMAGE-TEST && conntrack --version';
    const result = await runCommand('unshare', [
      '--net',
      '--mount',
      'chroot',
      rootfs,
      'sh',
      '-c',
      script,
    ]);
    expect(result.code, describeResult('iptables in the image', result)).toBe(0);
    expect(result.stdout).toContain('-N KUBE-IMAGE-TEST');
    expect(`${result.stdout}${result.stderr}`).toMatch(/conntrack v1\./);
  });

  it('runs the daemon as its unprivileged user: /healthz answers and a Service is proxied', async () => {
    const base = loopbackBase();
    const clusterIP = `${base}.1`;
    const backends = await startBackends({ b: `${base}.2` });
    const servicePort = 20_000 + Math.floor(Math.random() * 20_000);
    const healthz = `${base}.1:${servicePort + 1}`;
    await mkdir(join(rootfs, 'etc/userspace-proxy'), { recursive: true });
    await writeFile(
      join(rootfs, 'etc/userspace-proxy/services.yaml'),
      serviceWithSlice({
        clusterIP,
        port: servicePort,
        endpoints: [{ ip: `${base}.2`, port: backends.port }],
      }),
    );
    // What an engine does: its own mount and pid namespaces (pid 1 is the daemon), /proc, a minimal
    // /dev on tmpfs, then the image's entry point as its user with exactly its environment. The
    // image's Cmd (--config) is replaced by a services file, as `podman run IMAGE ARGS…` would.
    const [entry] = spec.process.args;
    const args = [
      entry as string,
      '--services-file=/etc/userspace-proxy/services.yaml',
      `--healthz-bind-address=${healthz}`,
      `--metrics-bind-address=${base}.1:${servicePort + 2}`,
    ];
    const { uid, gid } = spec.process.user;
    const enter = [
      'r="$1"; u="$2"; shift 2',
      'mount -t proc proc "$r/proc"',
      'mount -t tmpfs -o mode=755,nosuid tmpfs "$r/dev"',
      'mknod -m 666 "$r/dev/null" c 1 3; mknod -m 666 "$r/dev/zero" c 1 5',
      'mknod -m 666 "$r/dev/random" c 1 8; mknod -m 666 "$r/dev/urandom" c 1 9',
      'exec chroot --userspec="$u" "$r" /usr/bin/env -i "$@"',
    ].join('\n');
    const daemon = spawn(
      'unshare',
      [
        '--mount',
        '--pid',
        '--fork',
        '--kill-child',
        'sh',
        '-euc',
        enter,
        'sh',
        rootfs,
        `${uid}:${gid}`,
        ...spec.process.env,
        ...args,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    daemon.stdout.on('data', (c) => {
      output += c;
    });
    daemon.stderr.on('data', (c) => {
      output += c;
    });
    const exited = new Promise<number | null>((resolve) =>
      daemon.on('exit', (code) => resolve(code)),
    );
    /** The daemon: the one child of unshare (sh, chroot and env exec'd into it). */
    const daemonPid = () => {
      const children = readFileSync(`/proc/${daemon.pid}/task/${daemon.pid}/children`, 'utf8');
      const pid = Number(children.trim().split(/\s+/)[0]);
      return Number.isInteger(pid) && pid > 0 ? pid : undefined;
    };
    try {
      await waitFor(
        async () => (await httpStatus(`http://${healthz}/healthz`)) === 200,
        60_000,
        `/healthz of the daemon in the image\n${output}`,
        100,
      );
      const pid = await waitFor(daemonPid, 5_000, 'the daemon pid');
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      expect(status).toMatch(new RegExp(`^Uid:\\s+${uid}\\s`, 'm'));
      expect(readFileSync(`/proc/${pid}/cmdline`, 'utf8')).toContain(
        '/usr/local/bin/userspace-proxy',
      );

      const client = new Client(clusterIP, servicePort);
      client.socket.write('hello');
      await waitFor(() => client.received === 'b:hello', 10_000, `the proxied echo\n${output}`);
      client.socket.destroy();

      // SIGTERM reaches the daemon as pid 1 of its namespace: it drains and exits 0.
      process.kill(pid, 'SIGTERM');
      expect(await exited).toBe(0);
      expect(output).toContain('stopped');
      expect(output).toMatch(/Node\.js v20\./); // the image's own Node, as the start line says
    } finally {
      daemon.kill('SIGKILL'); // --kill-child: the daemon goes with it
      await backends.close();
    }
  }, 120_000);
});

describe('deploy/ and the image', () => {
  const read = (path: string) => readFileSync(join(REPO_ROOT, path), 'utf8');
  const version = JSON.parse(read('packages/server/package.json')).version as string;

  it('the DaemonSet names the image build.sh tags, and runs its command', () => {
    const ds = read('deploy/daemonset.yaml');
    expect(ds).toContain(`image: userspace-proxy:${version}`);
    expect(ds).toMatch(/command: \[userspace-proxy\]/);
    expect(containerfileFinalStage().get('ENTRYPOINT')).toEqual([
      '["/usr/local/bin/userspace-proxy"]',
    ]);
    // The Containerfile's default --config is where the DaemonSet mounts its ConfigMap.
    expect(containerfileFinalStage().get('CMD')).toEqual([
      '["--config=/etc/userspace-proxy/config.yaml"]',
    ]);
    expect(ds).toContain('--config=/etc/userspace-proxy/config.yaml');
  });

  it('runs the shipped userspace mode as root, while the image defaults to a non-root user', () => {
    expect(read('deploy/configmap.yaml')).toMatch(/^\s+mode: userspace$/m);
    const ds = read('deploy/daemonset.yaml');
    expect(ds).toMatch(/^\s+runAsUser: 0$/m);
    expect(ds).toMatch(/^\s+privileged: true$/m);
    expect(containerfileFinalStage().get('USER')).toEqual(['65532:65532']);
    expect(read('deploy/image/oci-pack.mjs')).toContain("const IMAGE_USER = '65532:65532';");
  });
});
