import type { ChildProcess } from 'node:child_process';
import { statSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRawSctpEngine, type RawSctpEngine, type SctpMessage } from '@userspace-proxy/sctp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Netns, NetnsSandbox, netnsSupport } from '../../linux/src/test-support/netns.js';
import { REPO_ROOT } from './test-support/daemon-process.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { until } from './test-support/wait.js';

/**
 * `--sctp-transport=raw` end to end: the daemon (the real bin from source) in a "node" namespace
 * serves an SCTP Service natively over raw IPv4; the client and the echo endpoint are raw engines
 * of this process whose helpers run in their own namespaces. Nothing leaves the namespaces.
 *   client 10.N.1.2 ─veth─ 10.N.1.1 node (Service 10.N.9.9 on lo) 10.N.2.1 ─veth─ 10.N.2.2 echo
 */
const support = netnsSupport(['cc']);
const why = support.ok ? '' : ` (skipped: ${support.reason})`;
const N = 200 + Math.floor(Math.random() * 50);
const CLIENT = `10.${N}.1.2`;
const NODE_A = `10.${N}.1.1`;
const NODE_B = `10.${N}.2.1`;
const ECHO = `10.${N}.2.2`;
const SERVICE = `10.${N}.9.9`;
const MAIN = fileURLToPath(new URL('./main.ts', import.meta.url));

/**
 * The folders between `/` and `dir` that other users (here `nobody`) cannot enter, or read when it
 * is `dir` itself: a checkout in a 0700 folder (`mktemp -d`) cannot be run as `nobody`, which
 * otherwise fails far from the cause ("Cannot find package 'tsx'").
 */
function closedToOthers(dir: string): string[] {
  const closed: string[] = [];
  for (let d = dir; ; d = dirname(d)) {
    const mode = statSync(d).mode;
    const need = d === dir ? 0o005 : 0o001;
    if ((mode & need) !== need) closed.push(`${d} (mode ${(mode & 0o777).toString(8)})`);
    if (dirname(d) === d) return closed;
  }
}

/** The daemon's bin from source, as it runs in development. */
const daemonArgv = [
  process.execPath,
  '--conditions=@userspace-proxy/source',
  '--import',
  'tsx',
  MAIN,
];
const sandbox = new NetnsSandbox();
let file = '';
const engines: RawSctpEngine[] = [];
let dir = '';
let daemon: ChildProcess | undefined;
let stderr = '';
let client: RawSctpEngine;

function engineIn(ns: Netns): RawSctpEngine {
  const e = createRawSctpEngine({
    association: { rtoInitial: 100, rtoMin: 100, rtoMax: 1000 },
    helper: { command: ['ip', 'netns', 'exec', ns.name] },
  });
  engines.push(e);
  return e;
}

describe.skipIf(!support.ok)(`the daemon with --sctp-transport=raw${why}`, () => {
  beforeAll(async () => {
    const nsClient = await sandbox.namespace();
    const nsNode = await sandbox.namespace();
    const nsEcho = await sandbox.namespace();
    await sandbox.link(nsClient, nsNode, { addressA: `${CLIENT}/24`, addressB: `${NODE_A}/24` });
    await sandbox.link(nsNode, nsEcho, { addressA: `${NODE_B}/24`, addressB: `${ECHO}/24` });
    await nsNode.exec('ip', ['addr', 'add', `${SERVICE}/32`, 'dev', 'lo']);
    await nsClient.exec('ip', ['route', 'add', `${SERVICE}/32`, 'via', NODE_A]);

    const echo = await engineIn(nsEcho).listen({ address: ECHO, port: 3868 });
    echo.on('association', (a) =>
      a.on('message', (m: SctpMessage) =>
        a.send({ ...m, data: Buffer.concat([Buffer.from('echo:'), m.data]) }),
      ),
    );
    client = engineIn(nsClient);

    dir = await mkdtemp(join(tmpdir(), 'up-sctp-raw-'));
    file = join(dir, 'services.yaml');
    await writeFile(
      file,
      serviceWithSlice({
        clusterIP: SERVICE,
        port: 3868,
        portName: 'diameter',
        protocol: 'SCTP',
        endpoints: [{ ip: ECHO, port: 3868 }],
      }),
    );
    await chmod(dir, 0o755);
    await chmod(file, 0o644);
    const argv = [
      ...daemonArgv,
      '--services-file',
      file,
      '--sctp-transport',
      'raw',
      '--min-sync-period',
      '10ms',
      '--healthz-bind-address',
      '127.0.0.1:10256',
      '--metrics-bind-address',
      '127.0.0.1:10249',
    ];
    daemon = sandbox.spawnIn(nsNode, argv, {
      cwd: REPO_ROOT,
      env: { ...process.env, KUBERNETES_SERVICE_HOST: '' },
    });
    daemon.stderr?.on('data', (c: Buffer) => {
      stderr = (stderr + c.toString()).slice(-20_000);
    });
  }, 60_000);

  afterAll(async () => {
    for (const e of engines) await e.close();
    await sandbox.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 30_000);

  it('relays native SCTP through the Service address: streams, PPIDs and boundaries kept, graceful shutdown', async () => {
    const received: SctpMessage[] = [];
    let association: Awaited<ReturnType<RawSctpEngine['connect']>> | undefined;
    await until(
      async () => {
        try {
          association = await client.connect({
            address: SERVICE,
            port: 3868,
            association: { maxInitRetransmits: 2 },
            signal: AbortSignal.timeout(2_000),
          });
          return true;
        } catch {
          return false;
        }
      },
      'an association through the daemon',
      40_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${stderr}`);
    });
    const a = association as NonNullable<typeof association>;
    a.on('message', (m: SctpMessage) => received.push(m));
    for (let i = 0; i < 60; i++)
      a.send({ streamId: i % 2, ppid: 46, data: Buffer.from(`m${i}:${'y'.repeat(i * 50)}`) });
    await until(() => received.length === 60, 'every echo', 20_000);
    for (const s of [0, 1]) {
      const want = Array.from({ length: 60 }, (_, i) => i).filter((i) => i % 2 === s);
      expect(
        received
          .filter((m) => m.streamId === s)
          .map((m) => Number(/^echo:m(\d+):/.exec(m.data.toString())?.[1])),
      ).toEqual(want);
    }
    expect(received.every((m) => m.ppid === 46)).toBe(true);
    const closed = new Promise<string>((resolve) => a.once('close', (i) => resolve(i.reason)));
    a.shutdown();
    expect(await closed).toBe('shutdown');
  }, 90_000);

  it("stops at start-up with the raw transport's error when not root (run as nobody)", async () => {
    const closed = closedToOthers(REPO_ROOT);
    if (closed.length > 0) {
      throw new Error(
        `this test runs the daemon as nobody, who cannot read the checkout: ${closed.join(', ')}; clone into a folder others may enter (chmod o+rx)`,
      );
    }
    const ns = await sandbox.namespace();
    const child = sandbox.spawnIn(
      ns,
      [
        'setpriv',
        '--reuid=65534',
        '--regid=65534',
        '--clear-groups',
        ...daemonArgv,
        '--services-file',
        file,
        '--sctp-transport',
        'raw',
        '--healthz-bind-address',
        '127.0.0.1:10256',
        '--metrics-bind-address',
        '127.0.0.1:10249',
      ],
      { cwd: REPO_ROOT, env: { ...process.env, HOME: tmpdir(), KUBERNETES_SERVICE_HOST: '' } },
    );
    let err = '';
    child.stderr?.on('data', (c: Buffer) => {
      err += c.toString();
    });
    child.stdout?.on('data', (c: Buffer) => {
      err += c.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(1);
    expect(err).toContain('the raw SCTP transport needs root (or CAP_NET_RAW)');
  }, 60_000);
});
