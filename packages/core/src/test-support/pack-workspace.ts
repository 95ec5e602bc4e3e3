/**
 * Builds the workspace's publishable packages and packs them with pnpm, the way a release would:
 * for the tests that check what a tarball carries (publish-ready.test.ts) and that install the
 * tarballs into a fresh project outside the workspace (pack-install.test.ts).
 *
 * Building is what `pnpm build` runs: `tsc -b tsconfig.build.json`, incremental, so it costs a
 * full build only on a fresh clone, then the daemon's bundle of its cluster source. Two test files may ask at once (vitest runs files in parallel
 * workers), and two `tsc -b` writing the same dist/ would corrupt it, so builds take a lock: a
 * directory created atomically, holding the owner's pid so a crashed run's lock is taken over.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The workspace root (this file is packages/core/src/test-support/). */
export const REPO_ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '../../../..');

/** The publishable packages, by folder under packages/. */
export const PUBLISHED_PACKAGES = [
  'core',
  'linux',
  'kubernetes',
  'idler',
  'sctp',
  'server',
] as const;
export type PackageFolder = (typeof PUBLISHED_PACKAGES)[number];

/** The pnpm the README pins; `npx -y` fetches it once and reuses its cache after. */
const PNPM = ['-y', 'pnpm@12.4.2'];

/** How long a build waits for another test's build before giving up. */
const BUILD_LOCK_WAIT_MS = 180_000;

/** One packed package. */
export interface PackedPackage {
  folder: PackageFolder;
  /** The package name, as in its package.json. */
  name: string;
  /** Absolute path of the .tgz. */
  tarball: string;
}

/** A command's output, kept for error messages. */
export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs a command without a shell; never throws for a non-zero exit (the caller asserts and shows
 * the output), only for a command that cannot start at all.
 */
export async function runCommand(
  file: string,
  args: readonly string[],
  options: { cwd?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<CommandResult> {
  try {
    const { stdout, stderr } = await run(file, [...args], {
      cwd: options.cwd ?? REPO_ROOT,
      timeout: options.timeoutMs ?? 120_000,
      maxBuffer: 64 * 1024 * 1024,
      env: options.env ?? process.env,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as NodeJS.ErrnoException & {
      code?: number | string;
      stdout?: string;
      stderr?: string;
      killed?: boolean;
      signal?: string;
    };
    if (typeof e.code === 'string') throw error; // ENOENT and the like: the command is missing
    const why = e.killed ? `\n(killed by ${e.signal ?? 'a signal'}: timeout?)` : '';
    return { code: e.code ?? 1, stdout: e.stdout ?? '', stderr: `${e.stderr ?? ''}${why}` };
  }
}

/** Formats a command's result for an assertion message. */
export function describeResult(what: string, result: CommandResult): string {
  return `${what} exited with ${result.code}\n--- stdout\n${result.stdout}\n--- stderr\n${result.stderr}`;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Takes the build lock, waiting for (or taking over from a dead) holder. Returns the release. */
async function lockBuild(): Promise<() => void> {
  const lock = join(REPO_ROOT, 'node_modules', '.userspace-proxy-build.lock');
  const owner = join(lock, 'pid');
  const deadline = Date.now() + BUILD_LOCK_WAIT_MS;
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(owner, String(process.pid));
      return () => rmSync(lock, { recursive: true, force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    let holder = Number.NaN;
    try {
      holder = Number(readFileSync(owner, 'utf8'));
    } catch {
      // the holder has made the directory but not written its pid yet
    }
    if (Number.isInteger(holder) && holder > 0 && !pidAlive(holder)) {
      rmSync(lock, { recursive: true, force: true });
      continue;
    }
    if (Date.now() > deadline) {
      throw new Error(`the build lock ${lock} is still held (pid ${holder}); remove it if stale`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Builds every package's dist/ (incremental `tsc -b`), one build at a time. */
export async function buildWorkspace(): Promise<void> {
  const release = await lockBuild();
  try {
    const tsc = join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const result = await runCommand(process.execPath, [tsc, '-b', 'tsconfig.build.json'], {
      timeoutMs: 180_000,
    });
    if (result.code !== 0) throw new Error(describeResult('tsc -b tsconfig.build.json', result));
    // The second half of `pnpm build`: the daemon's bundle of its cluster source.
    const bundle = join(REPO_ROOT, 'packages', 'server', 'scripts', 'bundle-kubernetes.mjs');
    const bundled = await runCommand(process.execPath, [bundle], { timeoutMs: 120_000 });
    if (bundled.code !== 0) throw new Error(describeResult('bundle-kubernetes.mjs', bundled));
  } finally {
    release();
  }
}

/** Reads a package's package.json. */
export function readManifest(folder: string): Record<string, unknown> {
  return JSON.parse(readFileSync(join(REPO_ROOT, 'packages', folder, 'package.json'), 'utf8'));
}

/** `folder` and the workspace packages it depends on, directly or not, dependencies first. */
export function withWorkspaceDependencies(folder: PackageFolder): PackageFolder[] {
  const byName = new Map<string, PackageFolder>(
    PUBLISHED_PACKAGES.map((f) => [String(readManifest(f).name), f]),
  );
  const order: PackageFolder[] = [];
  const visit = (f: PackageFolder): void => {
    if (order.includes(f)) return;
    const deps = (readManifest(f).dependencies ?? {}) as Record<string, string>;
    for (const [name, range] of Object.entries(deps)) {
      const dep = byName.get(name);
      if (dep && range.startsWith('workspace:')) visit(dep);
    }
    order.push(f);
  };
  visit(folder);
  return order;
}

/**
 * Builds, then packs each of `folders` with `pnpm pack` into a new temporary directory (which the
 * caller removes). pnpm, not npm, because only pnpm rewrites `workspace:*` ranges to versions.
 */
export async function packPackages(folders: readonly PackageFolder[]): Promise<PackedPackage[]> {
  await buildWorkspace();
  const destination = await mkdtemp(join(tmpdir(), 'userspace-proxy-packs-'));
  const packed: PackedPackage[] = [];
  for (const folder of folders) {
    const result = await runCommand(
      'npx',
      [...PNPM, 'pack', '--pack-destination', destination, '--json'],
      { cwd: join(REPO_ROOT, 'packages', folder) },
    );
    if (result.code !== 0)
      throw new Error(describeResult(`pnpm pack in packages/${folder}`, result));
    let tarball: unknown;
    try {
      tarball = (JSON.parse(result.stdout) as { filename?: unknown }).filename;
    } catch {
      // reported below
    }
    if (typeof tarball !== 'string' || !(await readdir(destination)).includes(basename(tarball))) {
      throw new Error(`pnpm pack in packages/${folder} wrote no tarball\n${result.stdout}`);
    }
    packed.push({ folder, name: String(readManifest(folder).name), tarball });
  }
  return packed;
}
