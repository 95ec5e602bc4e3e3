/**
 * The published surface is enough on its own: @userspace-proxy/core is packed as a release would
 * pack it (with the workspace packages it depends on), installed with npm into a fresh project in
 * the OS temporary directory (outside the workspace, so nothing resolves to the sources), and a
 * program written against it (test-support/pack-fixture/) is typechecked with `strict` and
 * `skipLibCheck: false` (our .d.ts files must compile in a user's project) and run with node.
 *
 * npm fetches core's third-party dependencies (eventemitter3, p-limit, tslog) and @types/node from
 * the registry, or from its cache when it has them (`--prefer-offline`). Skipped only when npm is
 * missing.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  describeResult,
  type PackedPackage,
  packPackages,
  REPO_ROOT,
  runCommand,
  withWorkspaceDependencies,
} from './test-support/pack-workspace.js';

const FIXTURE = join(REPO_ROOT, 'packages/core/src/test-support/pack-fixture');
/** The fixture's entry file, compiled to dist/<name>.js in the project. */
const PROGRAM = 'holding-socket';

const npmMissing = spawnSync('npm', ['--version'], { encoding: 'utf8' }).status !== 0;

/** The @types/node the workspace is typechecked with, so the project sees the same Node API. */
function typesNodeVersion(): string {
  const root = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as {
    devDependencies: Record<string, string>;
  };
  const version = root.devDependencies['@types/node'];
  if (!version) throw new Error('the root package.json has no @types/node devDependency');
  return version;
}

const cleanups: string[] = [];
afterAll(async () => {
  for (const dir of cleanups) await rm(dir, { recursive: true, force: true });
});

const title = npmMissing
  ? '@userspace-proxy/core installed from its tarball (skipped: npm is not on PATH)'
  : '@userspace-proxy/core installed from its tarball';

describe.skipIf(npmMissing)(title, () => {
  it('typechecks strictly and runs a holding socket built on the public surface: held early bytes reach the backend after hand-over', async () => {
    const packed: PackedPackage[] = await packPackages(withWorkspaceDependencies('core'));
    if (packed[0]) cleanups.push(dirname(packed[0].tarball));

    const project = await mkdtemp(join(tmpdir(), 'userspace-proxy-consumer-'));
    cleanups.push(project);
    const dependencies = Object.fromEntries(packed.map((p) => [p.name, `file:${p.tarball}`]));
    writeFileSync(
      join(project, 'package.json'),
      `${JSON.stringify(
        {
          name: 'userspace-proxy-consumer',
          private: true,
          type: 'module',
          dependencies,
          devDependencies: { '@types/node': typesNodeVersion() },
        },
        null,
        2,
      )}\n`,
    );
    writeFileSync(
      join(project, 'tsconfig.json'),
      `${JSON.stringify(
        {
          compilerOptions: {
            strict: true,
            target: 'ES2022',
            module: 'NodeNext',
            moduleResolution: 'NodeNext',
            skipLibCheck: false,
            types: ['node'],
            rootDir: 'src',
            outDir: 'dist',
          },
          include: ['src'],
        },
        null,
        2,
      )}\n`,
    );
    cpSync(FIXTURE, join(project, 'src'), { recursive: true });

    // A project's own .npmrc and the workspace's do not apply: it lives outside both.
    const install = await runCommand(
      'npm',
      ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'],
      { cwd: project, timeoutMs: 180_000 },
    );
    expect(install.code, describeResult(`npm install in ${project}`, install)).toBe(0);

    const installed = JSON.parse(
      readFileSync(join(project, 'node_modules/@userspace-proxy/core/package.json'), 'utf8'),
    ) as { version: string };
    expect(installed.version).toBe(
      (
        JSON.parse(readFileSync(join(REPO_ROOT, 'packages/core/package.json'), 'utf8')) as {
          version: string;
        }
      ).version,
    );

    const tsc = join(REPO_ROOT, 'node_modules/typescript/bin/tsc');
    const typecheck = await runCommand(process.execPath, [tsc, '-p', 'tsconfig.json'], {
      cwd: project,
    });
    expect(typecheck.code, describeResult(`tsc -p ${project}/tsconfig.json`, typecheck)).toBe(0);

    const program = await runCommand(process.execPath, [join('dist', `${PROGRAM}.js`)], {
      cwd: project,
      timeoutMs: 60_000,
    });
    const what = `node dist/${PROGRAM}.js in ${project}`;
    expect(program.code, describeResult(what, program)).toBe(0);
    expect(program.stdout.split('\n'), describeResult(what, program)).toContain('OK');
  }, 300_000);
});
