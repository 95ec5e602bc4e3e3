#!/usr/bin/env node
// Makes dist/kubernetes.bundle.js: the built @userspace-proxy/kubernetes with @kubernetes/client-node
// and their dependencies in one ES module, for the daemon (src/kubernetes-bundle.ts says why and
// how the daemon uses it). Run after `tsc -b` (the root `pnpm build` does both):
//
//   node packages/server/scripts/bundle-kubernetes.mjs [--out DIR]
//
// Writes the bundle, its manifest (the digest of the package's dist/ it was made from, and the
// bundled packages) and kubernetes.bundle.licenses.txt (each bundled package's license text, which
// its license asks to keep with a redistributed copy). DIR (default packages/server/dist) must be
// inside packages/server, so that the bundle's one outside import, @userspace-proxy/core, resolves.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import {
  distDigest,
  KUBERNETES_BUNDLE_FILE,
  KUBERNETES_BUNDLE_MANIFEST,
  kubernetesPackageDir,
} from '../dist/kubernetes-bundle.js';

const serverDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const i = process.argv.indexOf('--out');
const out = resolve(i > 0 ? (process.argv[i + 1] ?? '') : join(serverDir, 'dist'));
const pkgDir = kubernetesPackageDir();
const entry = join(pkgDir, 'index.js');
if (!existsSync(entry)) {
  console.error(`bundle-kubernetes: ${entry} is missing: run tsc -b tsconfig.build.json first`);
  process.exit(1);
}

const result = await build({
  entryPoints: [entry],
  outfile: join(out, KUBERNETES_BUNDLE_FILE),
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  // The daemon's own core: one copy of its classes, its diagnostics channels and its defaults.
  external: ['@userspace-proxy/core'],
  // Less source text for V8 to keep; names stay, so stack traces still read.
  minifyWhitespace: true,
  minifySyntax: true,
  legalComments: 'eof',
  // client-node's CommonJS dependencies call require(); an ES module has none of its own.
  banner: {
    js: "import { createRequire as __upCreateRequire } from 'node:module'; const require = __upCreateRequire(import.meta.url);",
  },
  metafile: true,
  logLevel: 'warning',
});

/** The package.json folder that holds `file`, or undefined for the workspace's own files. */
function packageRoot(file) {
  let dir = dirname(file);
  while (dir !== dirname(dir)) {
    if (existsSync(join(dir, 'package.json')) && dir.includes(`node_modules${'/'}`)) return dir;
    dir = dirname(dir);
  }
  return undefined;
}

const roots = new Set();
for (const input of Object.keys(result.metafile.inputs)) {
  const root = packageRoot(resolve(input));
  if (root) roots.add(root);
}
const packages = [];
const licenses = [];
for (const root of [...roots].sort()) {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  if (!manifest.name || !manifest.version) continue; // a nested "type: module" marker file
  const id = `${manifest.name}@${manifest.version}`;
  if (packages.some((p) => p.startsWith(`${id} `))) continue;
  packages.push(`${id} (${manifest.license ?? 'see its files'})`);
  const file = readdirSync(root).find((n) => /^(licen[cs]e|copying)/i.test(n));
  const text = file ? readFileSync(join(root, file), 'utf8') : `License: ${manifest.license}`;
  licenses.push(`${'='.repeat(72)}\n${id}\n${'='.repeat(72)}\n${text.trim()}\n`);
}

writeFileSync(
  join(out, KUBERNETES_BUNDLE_MANIFEST),
  `${JSON.stringify({ digest: distDigest(pkgDir), packages }, null, 2)}\n`,
);
writeFileSync(
  join(out, 'kubernetes.bundle.licenses.txt'),
  `The packages bundled into ${KUBERNETES_BUNDLE_FILE}, with their licenses.\n\n${licenses.join('\n')}`,
);
const size = readFileSync(join(out, KUBERNETES_BUNDLE_FILE)).length;
console.error(
  `bundle-kubernetes: ${relative(process.cwd(), join(out, KUBERNETES_BUNDLE_FILE))} (${(size / 2 ** 20).toFixed(1)} MiB, ${packages.length} packages)`,
);
