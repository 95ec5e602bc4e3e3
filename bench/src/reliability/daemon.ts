import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The real `userspace-proxy` daemon as users run it: its bin, a KubeProxyConfiguration file and a
 * services file in a directory of its own, started with `--exit-with-parent` so that nothing
 * outlives the soak run even if the run itself is killed. The probes see it only from outside:
 * sockets, its services file, its metrics server and /proc.
 */

/** The repository root. */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** How the daemon is run: the built bin (what users run) or its sources through tsx (the smoke test). */
export type DaemonBuild = 'built' | 'sources';

/** What a probe asks of the daemon's configuration file. */
export interface DaemonOptions {
  /** The first three octets and dot of a loopback /24 of the probe's own (`127.A.B.`). */
  net: string;
  /** The services file's first content. */
  services: string;
  build: DaemonBuild;
  /** Extra fields of the `userspaceProxy` block, as YAML `key: value` lines. */
  userspaceProxy?: Record<string, string | number>;
  /** Top-level fields, as YAML `key: value` (e.g. `udpIdleTimeout: 30s`). */
  top?: Record<string, string | number>;
  /** RLIMIT_NOFILE (soft and hard) for the daemon, through prlimit(1). */
  nofile?: number;
}

/** A running daemon. */
export interface SoakDaemon {
  readonly pid: number;
  readonly dir: string;
  readonly healthz: string;
  readonly metricsUrl: string;
  /** Everything it wrote to stderr and stdout (the last 2 MB). */
  log(): string;
  /** Resolves with the exit code or signal name. */
  readonly exited: Promise<number | string>;
  /** Whether it is still running. */
  alive(): boolean;
  /** Replaces the services file atomically (write, then rename, as editors and ConfigMaps do). */
  writeServices(text: string): void;
  /** The metrics page, parsed into name{labels} → value. */
  metrics(): Promise<Map<string, number>>;
  /** Resident memory, bytes (VmRSS of /proc/PID/status). */
  rss(): number;
  /** Open descriptors (/proc/PID/fd). */
  fds(): number;
  /** Sends `signal` and waits for the exit, SIGKILL after `graceMs`. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<number | string>;
}

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

function yamlBlock(fields: Record<string, string | number> | undefined, indent: string): string {
  return Object.entries(fields ?? {})
    .map(([k, v]) => `${indent}${k}: ${v}\n`)
    .join('');
}

/** The bin's command line for `build`. */
export function daemonCommand(build: DaemonBuild): string[] {
  if (build === 'built') return [join(REPO_ROOT, 'packages/server/dist/main.js')];
  return [
    '--conditions=@userspace-proxy/source',
    '--import',
    'tsx',
    join(REPO_ROOT, 'packages/server/src/main.ts'),
  ];
}

/** Sums of every sample of the Prometheus text, keyed `name` and `name{labels}` as written. */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)/.exec(line);
    if (!m) continue;
    const value = Number(m[3]);
    const name = m[1] as string;
    out.set(name, (out.get(name) ?? 0) + value);
    if (m[2]) out.set(name + m[2], value);
  }
  return out;
}

/** GET `url`: status and body, or the error's message; never waits longer than `timeoutMs`. */
export function httpGet(url: string, timeoutMs = 3000): Promise<{ status: number; body: string }> {
  return new Promise((resolve) => {
    const req = get(url, { timeout: timeoutMs, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', (e) => resolve({ status: 0, body: e.message }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve({ status: 0, body: err.message }));
  });
}

/** VmRSS of `pid` in bytes; 0 when it is gone. */
export function rssOf(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** Starts the daemon and waits until its health server answers 200 (its first sync is done). */
export async function startDaemon(opts: DaemonOptions): Promise<SoakDaemon> {
  const dir = mkdtempSync(join(tmpdir(), 'soak-'));
  const hostPart = `${opts.net}2`;
  const healthz = `${hostPart}:10256`;
  const metricsAddr = `${hostPart}:10249`;
  const servicesPath = join(dir, 'services.yaml');
  writeFileSync(servicesPath, opts.services);
  const config = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
healthzBindAddress: ${healthz}
metricsBindAddress: ${metricsAddr}
bindAddressHardFail: true
${yamlBlock(opts.top, '')}iptables:
  minSyncPeriod: 10ms
userspaceProxy:
  servicesFile: services.yaml
${yamlBlock(opts.userspaceProxy, '  ')}`;
  const configPath = join(dir, 'config.yaml');
  writeFileSync(configPath, config);
  const node = [process.execPath, ...daemonCommand(opts.build), '--config', configPath];
  node.push('--exit-with-parent');
  const argv = opts.nofile ? ['prlimit', `--nofile=${opts.nofile}:${opts.nofile}`, ...node] : node;
  const child = spawn(argv[0] as string, argv.slice(1), {
    cwd: REPO_ROOT,
    env: { ...process.env, KUBERNETES_SERVICE_HOST: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  let log = '';
  const keep = (c: Buffer) => {
    log += c.toString();
    if (log.length > 2_000_000) log = log.slice(-1_000_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  let code: number | string | undefined;
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (c, s) => {
      live.delete(child);
      code = c ?? s ?? -1;
      resolve(code);
    });
  });
  const pid = child.pid as number;
  const metricsUrl = `http://${metricsAddr}/metrics`;
  const daemon: SoakDaemon = {
    pid,
    dir,
    healthz: `http://${healthz}`,
    metricsUrl,
    log: () => log,
    exited,
    alive: () => code === undefined,
    writeServices(text) {
      const tmp = join(dir, '.services.yaml.tmp');
      writeFileSync(tmp, text);
      renameSync(tmp, servicesPath);
    },
    async metrics() {
      const res = await httpGet(metricsUrl, 10_000);
      if (res.status !== 200) throw new Error(`metrics: ${res.status} ${res.body.slice(0, 200)}`);
      return parseMetrics(res.body);
    },
    rss: () => rssOf(pid),
    fds() {
      try {
        return readdirSync(`/proc/${pid}/fd`).length;
      } catch {
        return 0;
      }
    },
    async stop(signal = 'SIGTERM', graceMs = 30_000) {
      if (code === undefined) {
        child.kill(signal);
        const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dir, { recursive: true, force: true });
      return exited;
    },
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (code !== undefined) {
      throw new Error(`the daemon exited (${code}) at start:\n${log.slice(-3000)}`);
    }
    const res = await httpGet(`${daemon.healthz}/healthz`, 1000);
    if (res.status === 200) return daemon;
    if (Date.now() > deadline) {
      await daemon.stop('SIGKILL');
      throw new Error(`the daemon did not become healthy in 60 s:\n${log.slice(-3000)}`);
    }
    await sleep(50);
  }
}

/** The count of `userspace_proxy_manifest_reloads_total` (applied and rejected). */
export async function reloads(d: SoakDaemon): Promise<{ applied: number; rejected: number }> {
  const m = await d.metrics();
  return {
    applied: m.get('userspace_proxy_manifest_reloads_total{result="applied"}') ?? 0,
    rejected: m.get('userspace_proxy_manifest_reloads_total{result="rejected"}') ?? 0,
  };
}

/**
 * Writes `text` as the services file and waits until the daemon has applied or rejected it (its
 * reload counters moved); false when it did neither within `timeoutMs` (an unchanged file is not
 * reloaded at all).
 */
export async function applyServices(d: SoakDaemon, text: string, timeoutMs = 10_000) {
  const before = await reloads(d);
  d.writeServices(text);
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    await sleep(15);
    const now = await reloads(d);
    if (now.applied > before.applied) return 'applied';
    if (now.rejected > before.rejected) return 'rejected';
  }
  return 'none';
}

/** Waits `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `check` every 20 ms until it holds; false at the deadline. */
export async function until(check: () => boolean | Promise<boolean>, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await sleep(20);
  }
}
