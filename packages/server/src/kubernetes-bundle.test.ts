import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildWorkspace } from '../../core/src/test-support/pack-workspace.js';
import { FakeApiServer } from '../../kubernetes/src/test-support/fake-apiserver.js';
import {
  distDigest,
  importBundledKubernetes,
  KUBERNETES_BUNDLE_FILE,
  KUBERNETES_BUNDLE_MANIFEST,
  type KubernetesBundleStatus,
} from './kubernetes-bundle.js';
import { daemonConfigText } from './test-support/config-file.js';
import { killDaemon, REPO_ROOT, spawnDaemon } from './test-support/daemon-process.js';
import { loopbackBlock } from './test-support/loopback.js';
import { until } from './test-support/wait.js';

const run = promisify(execFile);
const SERVER = join(REPO_ROOT, 'packages/server');
const KUBE_DIST = join(REPO_ROOT, 'packages/kubernetes/dist');

/**
 * Runs `code` in a plain node process from packages/server (no test runner, no source condition),
 * as the built daemon runs, and returns what it prints as JSON.
 */
async function inNode(code: string): Promise<unknown> {
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', code], {
    cwd: SERVER,
    timeout: 60_000,
  });
  return JSON.parse(stdout);
}

describe('the daemon’s bundle of its cluster source', () => {
  let out = '';
  beforeAll(async () => {
    await buildWorkspace(); // tsc -b and the bundle into dist/, as `pnpm build`
    // A second bundle of the same build, in a folder of its own inside packages/server (where the
    // bundle's one outside import, @userspace-proxy/core, resolves), to be spoiled below.
    out = mkdtempSync(join(SERVER, '.bundle-test-'));
    await run(process.execPath, [join(SERVER, 'scripts/bundle-kubernetes.mjs'), '--out', out], {
      timeout: 120_000,
    });
  }, 300_000);
  afterAll(() => {
    if (out) rmSync(out, { recursive: true, force: true });
  });

  it('holds client-node inside and core outside, with the licenses of what it holds', () => {
    const bundle = readFileSync(join(out, KUBERNETES_BUNDLE_FILE), 'utf8');
    expect(bundle).not.toMatch(/from\s*["']@kubernetes\/client-node["']/);
    expect(bundle).toMatch(/from\s*["']@userspace-proxy\/core["']/);
    expect(bundle).not.toContain('class UserspaceProxier'); // core stays the daemon's own
    const manifest = JSON.parse(readFileSync(join(out, KUBERNETES_BUNDLE_MANIFEST), 'utf8'));
    expect(manifest.digest).toBe(distDigest(KUBE_DIST));
    expect(manifest.packages).toContain('@kubernetes/client-node@1.4.0 (Apache-2.0)');
    const licenses = readFileSync(join(out, 'kubernetes.bundle.licenses.txt'), 'utf8');
    expect(licenses).toContain('@kubernetes/client-node@1.4.0');
    expect(licenses).toContain('Apache License');
  });

  it('is what the built daemon loads, with the package’s exports', async () => {
    const result = await inNode(`
      import { importBundledKubernetes } from './dist/kubernetes-bundle.js';
      const statuses = [];
      const mod = await importBundledKubernetes(undefined, undefined, (s) => statuses.push(s));
      const pkg = await import('@userspace-proxy/kubernetes');
      console.log(JSON.stringify({
        statuses,
        same: Object.keys(mod).sort().join() === Object.keys(pkg).sort().join(),
        count: Object.keys(mod).length,
        create: typeof mod.createKubernetesSources,
      }));
    `);
    expect(result).toEqual({
      statuses: ['loaded'],
      same: true,
      count: expect.any(Number),
      create: 'function',
    });
  });

  it('serves a cluster in the built daemon, which says it loaded the bundle', async () => {
    const net = loopbackBlock();
    const api = await FakeApiServer.start();
    const dir = mkdtempSync(join(SERVER, '.bundle-test-'));
    const config = join(dir, 'config.yaml');
    writeFileSync(config, daemonConfigText(`${net}4`, ['iptables: { minSyncPeriod: 10ms }']));
    api.store.create('services', {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'web', namespace: 'default' },
      spec: { clusterIP: `${net}1`, ports: [{ name: 'http', port: 8080, protocol: 'TCP' }] },
    });
    // The bin users run, from dist/, with no source condition: what `pnpm build` made.
    const args = ['--config', config, '--master', api.url, '--hostname-override', 'n1'];
    const proc = spawnDaemon(args, {}, { built: true });
    try {
      const accepts = () =>
        new Promise<boolean>((resolve) => {
          const s = connect(8080, `${net}1`);
          s.once('connect', () => resolve(true)).once('error', () => resolve(false));
          s.once('close', () => s.destroy());
          s.setTimeout(1000, () => s.destroy());
        });
      await until(accepts, 'the Service listening', 30_000);
      expect(proc.stdout() + proc.stderr()).toContain('the cluster client is loaded as one bundle');
      proc.child.kill('SIGTERM');
      expect(await proc.exited).toBe(0);
    } finally {
      await killDaemon(proc);
      await api.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('is not used when it was made from another build of the package, or is missing', async () => {
    const statuses: KubernetesBundleStatus[] = [];
    const spoiled = mkdtempSync(join(SERVER, '.bundle-test-'));
    try {
      writeFileSync(join(spoiled, KUBERNETES_BUNDLE_FILE), 'throw new Error("must not load");\n');
      writeFileSync(
        join(spoiled, KUBERNETES_BUNDLE_MANIFEST),
        JSON.stringify({ digest: 'an older build', packages: [] }),
      );
      const dist = () => KUBE_DIST;
      expect(await importBundledKubernetes(spoiled, dist, (s) => statuses.push(s))).toBeUndefined();
      writeFileSync(join(spoiled, KUBERNETES_BUNDLE_MANIFEST), '{ not json');
      expect(await importBundledKubernetes(spoiled, dist, (s) => statuses.push(s))).toBeUndefined();
      rmSync(join(spoiled, KUBERNETES_BUNDLE_MANIFEST));
      expect(await importBundledKubernetes(spoiled, dist, (s) => statuses.push(s))).toBeUndefined();
    } finally {
      rmSync(spoiled, { recursive: true, force: true });
    }
    expect(statuses).toEqual(['stale', 'unreadable', 'absent']);
  });

  it('follows the package: a changed build of it changes the digest', () => {
    const dir = mkdtempSync(join(SERVER, '.bundle-test-'));
    try {
      writeFileSync(join(dir, 'a.js'), 'export const a = 1;\n');
      const before = distDigest(dir);
      writeFileSync(join(dir, 'a.js'), 'export const a = 2;\n');
      expect(distDigest(dir)).not.toBe(before);
      writeFileSync(join(dir, 'a.d.ts'), 'export declare const a: number;\n');
      const withTypes = distDigest(dir);
      expect(withTypes).not.toBe(before);
      writeFileSync(join(dir, 'a.d.ts'), 'export declare const a: 2;\n');
      expect(distDigest(dir)).toBe(withTypes); // only the .js files count
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
