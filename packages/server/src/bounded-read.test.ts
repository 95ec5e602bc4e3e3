import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  FileTooLargeError,
  MAX_CONFIG_FILE_BYTES,
  NotRegularFileError,
  readBoundedFile,
} from './bounded-read.js';
import { loadConfigurationFile } from './config-load.js';
import { inlineManifestParser } from './manifest-parser.js';
import { createManifestSource, ManifestError } from './source-manifest.js';

// Probe defect 3: `--config` (and the services file) were read whole with readFile, so a FIFO hung
// the start and /dev/zero or a huge file took the heap.

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-bounded-read-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A named pipe nobody writes to: `readFile` on it waits forever. */
function fifo(name: string): string {
  const path = join(dir, name);
  execFileSync('mkfifo', [path]);
  return path;
}

const HEADER = 'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n';

describe('readBoundedFile', () => {
  it('reads a regular file, and one behind a symlink, up to exactly the limit', async () => {
    const path = join(dir, 'a.yaml');
    await writeFile(path, 'x'.repeat(100));
    await symlink(path, join(dir, 'link.yaml'));
    expect(await readBoundedFile(path, { maxBytes: 100 })).toBe('x'.repeat(100));
    expect(await readBoundedFile(join(dir, 'link.yaml'), { maxBytes: 100 })).toHaveLength(100);
  });

  it('refuses a file one byte over the limit, with a stable code and both sizes', async () => {
    const path = join(dir, 'big.yaml');
    await writeFile(path, 'x'.repeat(101));
    const err = await readBoundedFile(path, { maxBytes: 100 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FileTooLargeError);
    expect(err).toMatchObject({ code: 'ERR_FILE_TOO_LARGE', size: 101, limit: 100 });
    expect((err as Error).message).toBe(
      `${path} is 101 bytes, larger than the limit of 100 bytes; it was not read`,
    );
  });

  it('refuses a FIFO, /dev/zero and a directory without reading them', async () => {
    const cases: [string, string][] = [
      [fifo('pipe'), 'a FIFO'],
      ['/dev/zero', 'a character device'],
      [dir, 'a directory'],
    ];
    for (const [path, what] of cases) {
      const err = await readBoundedFile(path, { maxBytes: 100 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NotRegularFileError);
      expect(err).toMatchObject({
        code: 'ERR_NOT_REGULAR_FILE',
        message: `${path} is ${what}, not a regular file; it was not read`,
      });
    }
  });

  it('refuses a symlink to a FIFO', async () => {
    const link = join(dir, 'config.yaml');
    await symlink(fifo('pipe'), link);
    await expect(readBoundedFile(link, { maxBytes: 100 })).rejects.toMatchObject({
      code: 'ERR_NOT_REGULAR_FILE',
    });
  });

  it('escapes and bounds the path it names', async () => {
    const sub = join(dir, `\u001b[31m${'p'.repeat(200)}`, 'q'.repeat(200));
    await mkdir(sub, { recursive: true });
    const err = (await readBoundedFile(sub, { maxBytes: 1 }).catch((e: unknown) => e)) as Error;
    expect(err.message).not.toContain('\u001b');
    expect(err.message.length).toBeLessThan(400);
  });
});

describe('the configuration file', () => {
  it('is refused over 1 MiB with the file named, before being parsed', async () => {
    const path = join(dir, 'config.yaml');
    await writeFile(path, `${HEADER}# ${'x'.repeat(MAX_CONFIG_FILE_BYTES)}\n`);
    const r = await loadConfigurationFile(path);
    expect(r.input).toBeUndefined();
    expect(r.errors).toEqual([
      `failed to read config file ${path}: ${path} is ${MAX_CONFIG_FILE_BYTES + HEADER.length + 3} bytes, larger than the limit of ${MAX_CONFIG_FILE_BYTES} bytes; it was not read`,
    ]);
  });

  it('at 1 MiB is still read', async () => {
    const path = join(dir, 'config.yaml');
    const padding = MAX_CONFIG_FILE_BYTES - HEADER.length - 'mode: userspace\n'.length - 3;
    await writeFile(path, `${HEADER}mode: userspace\n# ${'x'.repeat(padding)}\n`);
    const r = await loadConfigurationFile(path);
    expect(r.errors).toEqual([]);
    expect(r.input?.mode).toBe('userspace');
  });

  it('that is a FIFO or /dev/zero is an error, not a hang or a full heap', async () => {
    const pipe = fifo('config.yaml');
    expect((await loadConfigurationFile(pipe)).errors).toEqual([
      `failed to read config file ${pipe}: ${pipe} is a FIFO, not a regular file; it was not read`,
    ]);
    expect((await loadConfigurationFile('/dev/zero')).errors).toEqual([
      'failed to read config file /dev/zero: /dev/zero is a character device, not a regular file; it was not read',
    ]);
  });
});

describe('the services file', () => {
  it('that is a FIFO fails the start with the reason, instead of hanging it', async () => {
    const pipe = fifo('services.yaml');
    const err = await createManifestSource({ path: pipe, parser: inlineManifestParser }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ManifestError);
    expect((err as ManifestError).reasons).toEqual([
      `cannot read ${pipe}: ${pipe} is a FIFO, not a regular file; it was not read`,
    ]);
  });
});
