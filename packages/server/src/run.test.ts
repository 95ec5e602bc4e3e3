import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { decodeConfiguration } from './config-load.js';
import { type CommandIO, runCommand } from './run.js';
import { ask, type Backends, startBackends } from './test-support/backends.js';
import { loopbackBlock } from './test-support/loopback.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { until } from './test-support/wait.js';

const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const SERVICE_IP = `${NET}1`;
const BACKEND_IP = `${NET}2`;
const SERVERS_IP = `${NET}4`;

let dir: string;
let backends: Backends;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-run-'));
  backends = await startBackends({ A: BACKEND_IP });
});

afterEach(async () => {
  await backends.close();
  await rm(dir, { recursive: true, force: true });
});

/** An in-memory process: output, log lines, and the signal handler the command installs. */
function fakeIO() {
  const out = {
    stdout: '',
    stderr: '',
    logs: [] as string[],
    signal: undefined as ((s: string) => void) | undefined,
  };
  const io: CommandIO = {
    stdout: (t) => {
      out.stdout += t;
    },
    stderr: (t) => {
      out.stderr += t;
    },
    env: {},
    log: (line) => out.logs.push(line),
    onSignal: (handler) => {
      out.signal = handler;
      return () => {
        out.signal = undefined;
      };
    },
  };
  return { io, out };
}

const configText = (extra = '') =>
  [
    'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
    'kind: KubeProxyConfiguration',
    `healthzBindAddress: ${SERVERS_IP}:10256`,
    `metricsBindAddress: ${SERVERS_IP}:10249`,
    'logging: { format: json }',
    'userspaceProxy: { servicesFile: services.yaml, drainTimeout: 0s }',
    extra,
  ].join('\n');

async function writeManifest(): Promise<void> {
  await writeFile(
    join(dir, 'services.yaml'),
    serviceWithSlice({
      clusterIP: SERVICE_IP,
      port: 8080,
      endpoints: [{ ip: BACKEND_IP, port: backends.port }],
    }),
  );
}

describe('runCommand', () => {
  it('writes the effective configuration with --write-config-to', async () => {
    const { io } = fakeIO();
    const out = join(dir, 'effective.yaml');
    expect(
      await runCommand(
        ['--write-config-to', out, '--udp-timeout', '3s', '--services-file', 's.yaml'],
        io,
      ),
    ).toBe(0);
    const decoded = decodeConfiguration(await readFile(out, 'utf8'));
    expect(decoded.errors).toEqual([]);
    expect(decoded.input).toMatchObject({
      udpIdleTimeout: 3000,
      // relative to the working directory on the command line; absolute in the file (see
      // config-write.test.ts), so that --config reads the same file back
      userspaceProxy: { servicesFile: join(process.cwd(), 's.yaml') },
    });
  });

  it('stops with 0 on a signal', async () => {
    await writeManifest();
    await writeFile(join(dir, 'config.yaml'), configText());
    const { io, out } = fakeIO();
    const run = runCommand(['--config', join(dir, 'config.yaml')], io);
    await until(
      async () => (await ask(SERVICE_IP, 8080, 'a', 1000)) === 'A:a',
      'the Service to answer',
    );
    out.signal?.('SIGTERM');
    expect(await run).toBe(0);
    expect(out.signal).toBeUndefined();
  });

  it('ignores an invalid edit of the config file, and restarts (exit 1) on a valid change', async () => {
    await writeManifest();
    const path = join(dir, 'config.yaml');
    await writeFile(path, configText());
    const { io, out } = fakeIO();
    let code: number | undefined;
    const run = runCommand(['--config', path], io).then((c) => {
      code = c;
      return c;
    });
    await until(
      async () => (await ask(SERVICE_IP, 8080, 'a', 1000)) === 'A:a',
      'the Service to answer',
    );

    await writeFile(path, configText('mode: iptables'));
    await until(
      () => out.logs.some((l) => l.includes('the edited configuration file is invalid')),
      'the rejection',
    );
    expect(out.logs.join('\n')).toContain('KubeProxyConfiguration.Mode.ProxyMode');
    // Other changes in the directory re-check the file: the same mistake is logged once.
    for (let i = 0; i < 4; i++) {
      await writeFile(join(dir, 'beside.txt'), String(i));
      await new Promise((resolve) => setTimeout(resolve, 150));
    }
    expect(out.logs.filter((l) => l.includes('configuration file is invalid'))).toHaveLength(1);
    expect(code).toBeUndefined();
    expect(await ask(SERVICE_IP, 8080, 'b', 1000)).toBe('A:b');

    await writeFile(path, configText('udpIdleTimeout: 30s'));
    expect(await run).toBe(1);
    expect(out.logs.join('\n')).toContain(
      "content of the proxy server's configuration file was updated",
    );
  });

  it('exits 1 when the daemon cannot start', async () => {
    await writeFile(
      join(dir, 'services.yaml'),
      'kind: Service\nmetadata: { name: a }\nspec: { ports: [{ port: 0 }] }\n',
    );
    await writeFile(join(dir, 'config.yaml'), configText());
    const { io, out } = fakeIO();
    expect(await runCommand(['--config', join(dir, 'config.yaml')], io)).toBe(1);
    expect(out.logs.join('\n')).toContain('cannot start: invalid services file');
  });

  it('stops like on SIGTERM once its parent is gone, with --exit-with-parent', async () => {
    await writeManifest();
    await writeFile(join(dir, 'config.yaml'), configText());
    const { io, out } = fakeIO();
    let parent = 4242;
    const run = runCommand(['--config', join(dir, 'config.yaml'), '--exit-with-parent'], {
      ...io,
      parentPid: () => parent,
      parentCheckMs: 20,
    });
    await until(async () => (await ask(SERVICE_IP, 8080, 'a', 1000)) === 'A:a', 'the Service');
    parent = 1; // the kernel re-parents an orphan to init (or a subreaper)
    expect(await run).toBe(0);
    expect(out.logs.join('\n')).toContain('the parent process (pid 4242) exited; stopping');
    expect(await ask(SERVICE_IP, 8080, 'b', 1000)).toBe('ECONNREFUSED');
  });

  it('escapes and bounds what it quotes from a configuration file', async () => {
    const path = join(dir, 'config.yaml');
    await writeFile(path, `${configText()}\n"bad\\x1b[2Jkey": 1\nmode: "${'m'.repeat(100_000)}"\n`);
    const { io, out } = fakeIO();
    expect(await runCommand(['--config', path], io)).toBe(1);
    expect(out.stderr).toContain('unknown field "bad\\x1b[2Jkey" is ignored');
    expect(out.stderr).not.toContain('\x1b');
    expect(out.stderr).toMatch(/m…\(\d+ more\)/);
    expect(out.stderr.length).toBeLessThan(3000);
  });

  it('prints the first five of 10 000 configuration errors, and how many more', async () => {
    const path = join(dir, 'config.yaml');
    const bad = Array.from({ length: 10_000 }, (_, i) => `"bad-${i}-${'x'.repeat(60)}"`);
    await writeFile(path, `${configText()}\nnodePortAddresses: [${bad.join(', ')}]\n`);
    const { io, out } = fakeIO();
    expect(await runCommand(['--config', path], io)).toBe(1);
    const lines = out.stderr.split('\n').filter((l) => l.startsWith('  '));
    expect(lines).toHaveLength(6);
    expect(lines[0]).toContain('NodePortAddresses[0]');
    expect(lines[4]).toContain('NodePortAddresses[4]');
    expect(lines[5]).toBe('  … and 9995 more');
    expect(out.stderr.length).toBeLessThan(8000); // each shown one cut as before
  });

  it('logs an invalid edit with 10 000 errors as one bounded line, again only when they change', async () => {
    await writeManifest();
    const path = join(dir, 'config.yaml');
    await writeFile(path, configText());
    const { io, out } = fakeIO();
    const run = runCommand(['--config', path], io);
    await until(
      async () => (await ask(SERVICE_IP, 8080, 'a', 1000)) === 'A:a',
      'the Service to answer',
    );
    const rejections = () => out.logs.filter((l) => l.includes('configuration file is invalid'));
    // Two edits whose first five errors are the same and which differ only past them.
    const edit = (last: string) => {
      const bad = Array.from({ length: 10_000 }, (_, i) => `"bad-${i}"`);
      bad[9999] = `"${last}"`;
      return writeFile(path, configText(`nodePortAddresses: [${bad.join(', ')}]`));
    };
    await edit('first');
    await until(() => rejections().length === 1, 'the rejection');
    const line = rejections()[0] as string;
    expect(line).toContain('NodePortAddresses[4]');
    expect(line).not.toContain('NodePortAddresses[5]');
    expect(line).toContain('… and 9995 more');
    expect(line.length).toBeLessThan(8000);
    await edit('second');
    await until(() => rejections().length === 2, 'the second rejection');
    out.signal?.('SIGTERM');
    expect(await run).toBe(0);
  });

  it('prints help to stdout and flag errors to stderr', async () => {
    const help = fakeIO();
    expect(await runCommand(['--help'], help.io)).toBe(0);
    expect(help.out.stdout).toContain('Usage: userspace-proxy');
    const bad = fakeIO();
    expect(await runCommand(['--udp-timeout', 'soon'], bad.io)).toBe(1);
    expect(bad.out.stderr).toContain('invalid argument "soon" for "--udp-timeout" flag');
  });
});
