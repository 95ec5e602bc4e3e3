#!/usr/bin/env node
/**
 * Packs a root file system directory as a one-layer OCI image layout (image-spec 1.1): the
 * `oci-layout` marker, `index.json`, and under `blobs/sha256/` the gzipped layer, the image config
 * and the manifest, each named by its sha256 digest. build.sh calls it; it needs only Node and GNU tar.
 *
 * The layer is written by GNU tar with sorted names, numeric owners, no access or change times and
 * every modification time clamped to SOURCE_DATE_EPOCH (default: the newest commit's time, else
 * 0), and gzipped without a name or time stamp: the same root gives the same digests.
 *
 * The image config (entry point, user, environment) is defined here, in one place, so the layout
 * build.sh writes and deploy/image/Containerfile describe the same image (image.test.ts compares
 * them).
 *
 * Usage: node oci-pack.mjs --root DIR --layout DIR --name NAME --tag TAG --version VERSION
 *          [--comment TEXT]
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { createGzip } from 'node:zlib';

/** The user the image runs as: no name in any base image, so it collides with no host account. */
const IMAGE_USER = '65532:65532';

/** What a container of this image runs, and with what, unless the pod or engine overrides it. */
const IMAGE_CONFIG = {
  User: IMAGE_USER,
  Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'NODE_ENV=production'],
  Entrypoint: ['/usr/local/bin/userspace-proxy'],
  Cmd: ['--config=/etc/userspace-proxy/config.yaml'],
  WorkingDir: '/',
  ExposedPorts: { '10256/tcp': {} },
};

const MEDIA = {
  index: 'application/vnd.oci.image.index.v1+json',
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  config: 'application/vnd.oci.image.config.v1+json',
  layer: 'application/vnd.oci.image.layer.v1.tar+gzip',
};

/** Node's process.arch in the OCI (Go) spelling. */
const ARCH = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ppc64: 'ppc64le', s390x: 's390x' };

const sha256 = (data) => `sha256:${createHash('sha256').update(data).digest('hex')}`;

/** Streams `tar` of `root` through gzip into `file`; returns the digests of both forms. */
async function writeLayer(root, file, epoch) {
  const tar = spawn(
    'tar',
    [
      '--create',
      '--file=-',
      `--directory=${root}`,
      '--sort=name',
      '--numeric-owner',
      '--format=pax',
      '--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime',
      `--mtime=@${epoch}`,
      '--clamp-mtime',
      '.',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const exited = new Promise((resolve, reject) => {
    tar.on('error', reject);
    tar.on('close', (code) =>
      code === 0 ? resolve() : reject(new Error(`tar exited with ${code}`)),
    );
  });
  const diff = createHash('sha256');
  const blob = createHash('sha256');
  let size = 0;
  tar.stdout.on('data', (chunk) => diff.update(chunk));
  const gzip = createGzip({ level: 6 });
  gzip.on('data', (chunk) => {
    blob.update(chunk);
    size += chunk.length;
  });
  await Promise.all([pipeline(tar.stdout, gzip, createWriteStream(file)), exited]);
  return {
    diffId: `sha256:${diff.digest('hex')}`,
    digest: `sha256:${blob.digest('hex')}`,
    size,
  };
}

/** Writes a JSON blob; returns its descriptor. */
async function writeBlob(blobs, mediaType, value) {
  const data = Buffer.from(JSON.stringify(value));
  const digest = sha256(data);
  await writeFile(join(blobs, digest.slice('sha256:'.length)), data);
  return { mediaType, digest, size: data.length };
}

async function main() {
  const { values } = parseArgs({
    options: {
      root: { type: 'string' },
      layout: { type: 'string' },
      name: { type: 'string' },
      tag: { type: 'string' },
      version: { type: 'string' },
      comment: { type: 'string', default: '' },
    },
  });
  for (const key of ['root', 'layout', 'name', 'tag', 'version']) {
    if (!values[key]) throw new Error(`--${key} is required`);
  }
  const architecture = ARCH[process.arch];
  if (!architecture) throw new Error(`no OCI architecture for ${process.arch}`);
  const epoch = Number(process.env.SOURCE_DATE_EPOCH ?? '0');
  if (!Number.isInteger(epoch) || epoch < 0) throw new Error('SOURCE_DATE_EPOCH must be seconds');
  const created = new Date(epoch * 1000).toISOString();

  await rm(values.layout, { recursive: true, force: true });
  const blobs = join(values.layout, 'blobs', 'sha256');
  await mkdir(blobs, { recursive: true });
  const partial = join(blobs, 'layer.partial');
  const layer = await writeLayer(values.root, partial, epoch);
  await rename(partial, join(blobs, layer.digest.slice('sha256:'.length)));

  const labels = {
    'org.opencontainers.image.title': values.name,
    'org.opencontainers.image.version': values.version,
    'org.opencontainers.image.licenses': 'Apache-2.0',
    'org.opencontainers.image.description':
      'userspace-proxy: a user-space TCP/UDP/SCTP proxy for Kubernetes-style Services',
  };
  const config = await writeBlob(blobs, MEDIA.config, {
    created,
    architecture,
    os: 'linux',
    config: { ...IMAGE_CONFIG, Labels: labels },
    rootfs: { type: 'layers', diff_ids: [layer.diffId] },
    history: [{ created, created_by: 'deploy/image/build.sh', comment: values.comment }],
  });
  const manifest = await writeBlob(blobs, MEDIA.manifest, {
    schemaVersion: 2,
    mediaType: MEDIA.manifest,
    config,
    layers: [{ mediaType: MEDIA.layer, digest: layer.digest, size: layer.size }],
    annotations: { 'org.opencontainers.image.created': created, ...labels },
  });
  const index = {
    schemaVersion: 2,
    mediaType: MEDIA.index,
    manifests: [
      {
        ...manifest,
        platform: { architecture, os: 'linux' },
        annotations: {
          // `oci:LAYOUT:TAG` (skopeo, umoci) finds the image by this; `docker load` and
          // `ctr import` name it by the full reference.
          'org.opencontainers.image.ref.name': values.tag,
          'io.containerd.image.name': `docker.io/library/${values.name}:${values.tag}`,
        },
      },
    ],
  };
  await writeFile(join(values.layout, 'index.json'), JSON.stringify(index));
  await writeFile(
    join(values.layout, 'oci-layout'),
    JSON.stringify({ imageLayoutVersion: '1.0.0' }),
  );
  const { size } = await stat(join(blobs, layer.digest.slice('sha256:'.length)));
  process.stdout.write(
    `${values.layout}: manifest ${manifest.digest}, layer ${layer.digest} (${size} bytes)\n`,
  );
}

main().catch((err) => {
  process.stderr.write(`oci-pack: ${err.message}\n`);
  process.exit(1);
});
