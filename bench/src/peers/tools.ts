import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The programs the peers benchmark drives. */
export type Tool = 'iperf3' | 'wrk' | 'sockperf' | 'haproxy' | 'nginx';

/** Every tool, and the Debian package each comes from. */
export const TOOL_PACKAGES: Readonly<Record<Tool, string>> = {
  iperf3: 'iperf3',
  wrk: 'wrk',
  sockperf: 'sockperf',
  haproxy: 'haproxy',
  nginx: 'nginx',
};

/** nginx's stream module, packaged apart from nginx in Debian. */
export const STREAM_MODULE_PACKAGE = 'libnginx-mod-stream';
const STREAM_MODULE_PATHS = [
  '/usr/lib/nginx/modules/ngx_stream_module.so',
  '/usr/share/nginx/modules/ngx_stream_module.so',
];

/** Where each tool is (null: missing), and nginx's stream module. */
export interface Toolbox {
  paths: Record<Tool, string | null>;
  streamModule: string | null;
}

/** `name` on PATH, or in /usr/sbin and /sbin (haproxy and nginx live there; not every PATH has it). */
export function which(name: string, path = process.env.PATH ?? ''): string | null {
  for (const dir of [...path.split(':').filter(Boolean), '/usr/sbin', '/sbin']) {
    const file = join(dir, name);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // Not here.
    }
  }
  return null;
}

/** What is installed now. */
export function findTools(): Toolbox {
  const paths = Object.fromEntries(
    (Object.keys(TOOL_PACKAGES) as Tool[]).map((t) => [t, which(t)]),
  ) as Record<Tool, string | null>;
  return { paths, streamModule: STREAM_MODULE_PATHS.find((p) => existsSync(p)) ?? null };
}

/** The Debian packages that would complete `box`. */
export function missingPackages(box: Toolbox): string[] {
  const out = (Object.keys(TOOL_PACKAGES) as Tool[])
    .filter((t) => !box.paths[t])
    .map((t) => TOOL_PACKAGES[t]);
  if (!box.streamModule) out.push(STREAM_MODULE_PACKAGE);
  return out;
}

/**
 * Installs what is missing with apt-get when running as root, and says plainly what to do when it
 * cannot. While it installs, a policy-rc.d that refuses every service start is in place (unless the
 * system has one): Debian's nginx and haproxy packages would otherwise start system services
 * listening on all addresses, and this benchmark starts only its own servers, on loopback.
 */
export function ensureTools(install: boolean, log: (s: string) => void): Toolbox {
  let box = findTools();
  const missing = missingPackages(box);
  if (missing.length === 0) return box;
  const cmd = `apt-get install -y --no-install-recommends ${missing.join(' ')}`;
  if (!install) {
    log(`missing: ${missing.join(', ')} (--no-install given; to install: ${cmd})`);
    return box;
  }
  if (process.getuid?.() !== 0 || !which('apt-get')) {
    log(
      `missing: ${missing.join(', ')}. Not root or no apt-get here, so not installing; as root run: ${cmd}`,
    );
    return box;
  }
  log(`installing ${missing.join(' ')} with apt-get …`);
  const policy = '/usr/sbin/policy-rc.d';
  const ownPolicy = !existsSync(policy);
  if (ownPolicy)
    writeFileSync(policy, '#!/bin/sh\n# pnpm bench --peers: no service starts\nexit 101\n', {
      mode: 0o755,
    });
  try {
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    const args = ['install', '-y', '--no-install-recommends', ...missing];
    const opts = { stdio: 'inherit' as const, env, timeout: 600_000 };
    let r = spawnSync('apt-get', args, opts);
    if (r.status !== 0) {
      log('apt-get install failed; running apt-get update and trying once more');
      spawnSync('apt-get', ['update'], opts);
      r = spawnSync('apt-get', args, opts);
    }
    if (r.status !== 0)
      log(`apt-get install failed (exit ${r.status}); the missing tools are skipped`);
  } finally {
    if (ownPolicy) unlinkSync(policy);
  }
  box = findTools();
  const still = missingPackages(box);
  if (still.length) log(`still missing after installing: ${still.join(', ')}`);
  return box;
}

/** The first line a tool prints about its version, for the record (best effort). */
export function versionOf(tool: Tool, path: string): string {
  const flag: Record<Tool, string[]> = {
    iperf3: ['--version'],
    wrk: ['-v'],
    sockperf: ['--version'],
    haproxy: ['-v'],
    nginx: ['-v'],
  };
  const r = spawnSync(path, flag[tool], { encoding: 'utf8', timeout: 5000 });
  const text = `${r.stdout ?? ''}\n${r.stderr ?? ''}`;
  const m =
    /(?:iperf|HAProxy version|nginx version: nginx\/|wrk |sockperf, version )\s*v?([\w.+~/-]+)/.exec(
      text,
    );
  return m?.[1] ?? 'unknown';
}
