/**
 * Every publishable package's tarball, as `pnpm pack` makes it, is what a registry would serve:
 * it carries a README and the LICENSE, names no file it does not ship (exports, bin, source maps),
 * has its `workspace:` ranges rewritten, ships no tests, and passes publint and
 * @arethetypeswrong/cli. Both tools run on the local tarball and need no network.
 *
 * Why the tarballs ship src/ (without tests and test-support): the `@userspace-proxy/source`
 * export condition (which lets the workspace typecheck and test without a build) points at
 * src/*.ts, and every .js.map and .d.ts.map points at src/ too. Shipping the sources makes all of
 * them true, and gives users go-to-definition into real code and mapped stack traces. The
 * alternative, stripping the condition at pack time with pnpm's `publishConfig.exports`, would
 * mean a second exports map to keep in step, and dropping or rewriting the maps as well.
 * Nothing but this workspace sets that condition, so shipping it changes no user's resolution.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative, sep } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type CommandResult,
  describeResult,
  type PackedPackage,
  PUBLISHED_PACKAGES,
  packPackages,
  REPO_ROOT,
  readManifest,
  runCommand,
} from './test-support/pack-workspace.js';

/** The command of a root devDependency's bin, run with this node (no shell, no PATH lookup). */
function binOf(pkg: string, bin: string): string {
  const dir = join(REPO_ROOT, 'node_modules', pkg);
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
    bin: string | Record<string, string>;
  };
  const path = typeof manifest.bin === 'string' ? manifest.bin : manifest.bin[bin];
  if (path === undefined) throw new Error(`${pkg} has no bin ${bin}`);
  return join(dir, path);
}

/** Every file under `dir`, as paths relative to it with forward slashes. */
function listFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const entry of readdirSync(d, { withFileTypes: true })) {
      const full = join(d, entry.name);
      if (entry.isDirectory()) walk(full);
      else out.push(relative(dir, full).split(sep).join('/'));
    }
  };
  walk(dir);
  return out.sort();
}

/** Every string leaf of an exports (or bin) value, with the path of keys that leads to it. */
function targets(value: unknown, path: string[] = []): { path: string; target: string }[] {
  if (typeof value === 'string') return [{ path: path.join(' → '), target: value }];
  if (value === null || typeof value !== 'object') return [];
  return Object.entries(value).flatMap(([key, inner]) => targets(inner, [...path, key]));
}

const rootLicense = readFileSync(join(REPO_ROOT, 'LICENSE'), 'utf8');
let scratch = '';
let packed: PackedPackage[] = [];
/** publint's and attw's runs on each tarball, started together (they take seconds each). */
const lints = new Map<string, { publint: Promise<CommandResult>; attw: Promise<CommandResult> }>();

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'userspace-proxy-publish-ready-'));
  packed = await packPackages(PUBLISHED_PACKAGES);
  for (const pkg of packed) {
    lints.set(pkg.folder, { publint: runPublint(pkg.tarball), attw: runAttw(pkg.tarball) });
  }
}, 240_000);

/** publint on a tarball; `--strict` makes warnings fail too (suggestions are printed only). */
function runPublint(tarball: string): Promise<CommandResult> {
  return runCommand(process.execPath, [binOf('publint', 'publint'), 'run', tarball, '--strict']);
}

/** @arethetypeswrong/cli on a tarball, offline. */
function runAttw(tarball: string): Promise<CommandResult> {
  return runCommand(process.execPath, [
    binOf('@arethetypeswrong/cli', 'attw'),
    tarball,
    // ESM only ("type": "module", no require condition): CommonJS and node10 resolution are
    // unsupported on purpose, so their rows are not problems.
    '--profile',
    'esm-only',
    // The default looks @types packages up on the registry; ours ship their own types.
    '--no-definitely-typed',
    '--format',
    'ascii',
    '--no-color',
    '--no-emoji',
  ]);
}

afterAll(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
  const packs = packed[0] ? dirname(packed[0].tarball) : '';
  if (packs) await rm(packs, { recursive: true, force: true });
});

describe.each(PUBLISHED_PACKAGES)('the tarball of packages/%s', (folder) => {
  /** The tarball unpacked into scratch/<folder>/package, on first use. */
  function unpacked(): string {
    const dir = join(scratch, folder);
    if (!existsSync(join(dir, 'package'))) {
      const pkg = packed.find((p) => p.folder === folder);
      if (!pkg) throw new Error(`packages/${folder} was not packed`);
      runTar(pkg.tarball, dir);
    }
    return join(dir, 'package');
  }

  it('carries a README and the repository LICENSE', () => {
    const dir = unpacked();
    const readme = readFileSync(join(dir, 'README.md'), 'utf8');
    expect(readme).toContain(String(readManifest(folder).name));
    expect(readFileSync(join(dir, 'LICENSE'), 'utf8')).toBe(rootLicense);
  });

  it('has its workspace: ranges rewritten to versions', () => {
    const dir = unpacked();
    const text = readFileSync(join(dir, 'package.json'), 'utf8');
    expect(text).not.toContain('workspace:');
    const source = (readManifest(folder).dependencies ?? {}) as Record<string, string>;
    const shipped = (JSON.parse(text).dependencies ?? {}) as Record<string, string>;
    for (const [name, range] of Object.entries(source)) {
      if (!range.startsWith('workspace:')) continue;
      const depFolder = name.replace('@userspace-proxy/', '');
      expect(shipped[name], name).toBe(String(readManifest(depFolder).version));
    }
  });

  it('names only files it ships (exports, bin, source maps) and ships no tests', () => {
    const dir = unpacked();
    const files = listFiles(dir);
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    const missing: string[] = [];
    for (const { path, target } of [
      ...targets(manifest.exports, ['exports']),
      ...targets(manifest.bin, ['bin']),
    ]) {
      if (!existsSync(join(dir, target))) missing.push(`${path}: ${target}`);
    }
    for (const file of files.filter((f) => f.endsWith('.map'))) {
      const map = JSON.parse(readFileSync(join(dir, file), 'utf8')) as {
        sourceRoot?: string;
        sources: string[];
      };
      for (const source of map.sources) {
        const target = join(dir, dirname(file), map.sourceRoot ?? '', source);
        if (!existsSync(target)) missing.push(`${file} → ${source}`);
      }
    }
    for (const file of files.filter((f) => /\.(js|d\.ts)$/.test(f))) {
      const text = readFileSync(join(dir, file), 'utf8');
      const url = /\/\/# sourceMappingURL=(\S+)\s*$/.exec(text)?.[1];
      if (url && !existsSync(join(dir, dirname(file), url))) missing.push(`${file} → ${url}`);
    }
    const shown = missing.slice(0, 20);
    if (missing.length > shown.length) shown.push(`… and ${missing.length - shown.length} more`);
    expect(
      shown,
      'names of files the tarball does not hold (a .map naming a deleted source is a stale ' +
        'build output: remove packages/*/dist and run again)',
    ).toEqual([]);
    expect(files.filter((f) => /\.test\.ts$|(^|\/)test-support\//.test(f))).toEqual([]);
    expect(files.filter((f) => f.endsWith('.tsbuildinfo'))).toEqual([]);
    expect(statSync(join(dir, 'dist', 'index.js')).isFile()).toBe(true);
  });

  it('passes publint with no errors or warnings', async () => {
    const result = await lintsOf(folder).publint;
    expect(result.code, describeResult('publint', result)).toBe(0);
  }, 120_000);

  it('passes @arethetypeswrong/cli for an ESM-only package', async () => {
    const result = await lintsOf(folder).attw;
    expect(result.code, describeResult('attw', result)).toBe(0);
  }, 120_000);
});

function lintsOf(folder: string): {
  publint: Promise<CommandResult>;
  attw: Promise<CommandResult>;
} {
  const runs = lints.get(folder);
  if (!runs) throw new Error(`packages/${folder} was not packed`);
  return runs;
}

/** Unpacks a .tgz into `into`, which gets the `package/` folder npm tarballs hold. */
function runTar(tarball: string, into: string): void {
  mkdirSync(into, { recursive: true });
  const result = spawnSync('tar', ['-xzf', tarball, '-C', into], { encoding: 'utf8' });
  if (result.status !== 0) {
    throw new Error(`tar -xzf ${tarball} failed: ${result.error ?? result.stderr}`);
  }
}
