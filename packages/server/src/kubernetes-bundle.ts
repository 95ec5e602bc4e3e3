import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/**
 * The daemon's cluster source as one file. `@kubernetes/client-node` loads some 1 200 modules (every
 * API group, every model) whose source text V8 keeps for lazy compilation: about 70 MiB of the
 * daemon's RSS, of which it uses a few classes. `pnpm build` therefore also writes
 * `dist/kubernetes.bundle.js` (packages/server/scripts/bundle-kubernetes.mjs): the built
 * `@userspace-proxy/kubernetes` with client-node and its dependencies in one ES module, unused code
 * removed and whitespace squeezed, `@userspace-proxy/core` left outside so the daemon's core is the
 * one it uses. The code that runs is the same; only what is loaded is less (docs/operations.md,
 * "Memory"). Embedders are not affected: they import the package as usual.
 *
 * A bundle is used only while it matches the package it was made from: its manifest records a
 * digest of the package's built files, and a rebuilt package (a `tsc -b` without the bundling step)
 * makes the daemon load the package itself instead of a stale bundle.
 */

/** The bundle, next to this module in dist/. */
export const KUBERNETES_BUNDLE_FILE = 'kubernetes.bundle.js';
/** Its manifest: `{ digest, packages }`, written with it. */
export const KUBERNETES_BUNDLE_MANIFEST = 'kubernetes.bundle.json';

/** What the bundling script records beside the bundle. */
export interface KubernetesBundleManifest {
  /** {@link distDigest} of the package's dist/ when the bundle was made. */
  digest: string;
  /** `name@version (license)` of every package the bundle contains. */
  packages: string[];
}

/**
 * A digest of a built package: the names and contents of the `.js` files of its dist/ folder
 * (sorted). The same for the same build, whatever the file times.
 */
export function distDigest(dir: string): string {
  const hash = createHash('sha256');
  for (const name of readdirSync(dir)
    .filter((n) => n.endsWith('.js'))
    .sort()) {
    hash
      .update(name)
      .update('\0')
      .update(readFileSync(join(dir, name)))
      .update('\0');
  }
  return hash.digest('hex');
}

/** Where `@userspace-proxy/kubernetes`' entry file is, as this process resolves it. */
export function kubernetesPackageDir(): string {
  return dirname(fileURLToPath(import.meta.resolve('@userspace-proxy/kubernetes')));
}

/** Why {@link importBundledKubernetes} did not use a bundle, or that it did. */
export type KubernetesBundleStatus = 'loaded' | 'absent' | 'stale' | 'unreadable';

/**
 * Imports the bundle in `dir` (default: this module's folder) when it is there and was made from
 * the package in `packageDir`; `undefined` otherwise, and the caller imports the package. Never
 * throws for a missing, stale or unreadable manifest; a bundle that fails to load throws as the
 * package would.
 */
export async function importBundledKubernetes(
  dir: string = dirname(fileURLToPath(import.meta.url)),
  packageDir: () => string = kubernetesPackageDir,
  onStatus: (status: KubernetesBundleStatus) => void = () => {},
): Promise<Record<string, unknown> | undefined> {
  const manifestPath = join(dir, KUBERNETES_BUNDLE_MANIFEST);
  if (!existsSync(manifestPath) || !existsSync(join(dir, KUBERNETES_BUNDLE_FILE))) {
    onStatus('absent');
    return undefined;
  }
  let manifest: Partial<KubernetesBundleManifest>;
  let actual: string;
  try {
    manifest = JSON.parse(readFileSync(manifestPath, 'utf8')) as Partial<KubernetesBundleManifest>;
    actual = distDigest(packageDir());
  } catch {
    onStatus('unreadable');
    return undefined;
  }
  if (manifest.digest !== actual) {
    onStatus('stale');
    return undefined;
  }
  const mod = (await import(pathToFileURL(join(dir, KUBERNETES_BUNDLE_FILE)).href)) as Record<
    string,
    unknown
  >;
  onStatus('loaded');
  return mod;
}
