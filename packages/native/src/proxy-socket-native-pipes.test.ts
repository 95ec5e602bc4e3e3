/**
 * The TCP helper's grown pipes: a direction that turns bulk splices through a pipe grown to
 * 1 MiB (F_SETPIPE_SZ), half the helper CPU per GB of the kernel's 64 KiB pipe; a short
 * connection makes no pipe at all; the grown pipes share a budget (--pipe-budget), a direction
 * that does not fit takes a smaller pipe or the default one, and a closed connection gives its
 * share back; --pipe-bytes 0 never grows. The bytes arrive whole and in order in every case.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createProxySocketFactory, servicePortNameString } from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { connectTcp } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { type NativeTcpFactory, withNativeTcp } from './index.js';
import { buildRelayHelper } from './relay-protocol.js';
import {
  HAS_CC,
  HAS_STRACE,
  proxyInTest,
  randomLoopback,
  startBackend,
  useCleanup,
} from './test-support/native-tests.js';

const cleanup = useCleanup();
/** Why the tests that read the helper's fcntl calls skip where strace is missing (.ci/run installs it). */
const NO_STRACE = HAS_STRACE ? '' : ' (skipped: no strace on this machine to see F_SETPIPE_SZ)';
const servicePort = { namespace: 'ns', name: 'bulk', port: 'data', protocol: 'TCP' as const };
const key = servicePortNameString(servicePort);

/** The helper started as `real ARGS "$@"`, so a test can pass --pipe-bytes / --pipe-budget. */
async function helperWith(args: readonly string[]): Promise<string> {
  const real = await buildRelayHelper();
  const dir = mkdtempSync(join(tmpdir(), 'pipes-helper-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'helper.sh');
  const quote = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`;
  writeFileSync(path, `#!/bin/sh\nexec ${[real, ...args].map(quote).join(' ')} "$@"\n`);
  chmodSync(path, 0o755);
  return path;
}

async function proxy(args: readonly string[] = []): Promise<{
  host: string;
  port: number;
  f: NativeTcpFactory;
}> {
  const b = await startBackend(cleanup);
  const helperPath = args.length > 0 ? await helperWith(args) : undefined;
  const f = withNativeTcp(createProxySocketFactory(), {
    threads: 1,
    dialTimeoutsMs: [2000],
    ...(helperPath !== undefined ? { helperPath } : {}),
  });
  cleanup.push(() => f.close());
  const ctx = createSocketContext({
    loadBalancer: new FakeLoadBalancer({ [key]: [b.endpoint] }),
    protocol: 'TCP',
    ip: randomLoopback(),
    servicePort,
  });
  const socket = await f(ctx);
  proxyInTest(socket, ctx, fakeServiceInfo(), cleanup);
  return { host: socket.addr().address, port: socket.addr().port, f };
}

const digest = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/**
 * Sends `size` random bytes to the echo backend through the proxy and reads them back, pausing
 * the reading now and then (`slow`) so the pipes fill and the writes wait; resolves to whether
 * the echo equals what was sent.
 */
async function echoBulk(host: string, port: number, size: number, slow = false): Promise<boolean> {
  const sent = randomBytes(size);
  const c = await connectTcp(port, host);
  const got: Buffer[] = [];
  let have = 0;
  const done = new Promise<void>((resolve, reject) => {
    c.on('error', reject);
    c.on('data', (d: Buffer) => {
      got.push(d);
      have += d.length;
      if (have >= size) resolve();
      else if (slow && got.length % 16 === 0) {
        c.pause();
        setTimeout(() => c.resume(), 20);
      }
    });
  });
  c.write(sent);
  await done;
  c.destroy();
  return digest(Buffer.concat(got).subarray(0, size)) === digest(sent) && have === size;
}

/** strace of the helper's threads for fcntl and pipe2: its lines, once stopped. */
async function traceHelper(pid: number): Promise<() => Promise<string[]>> {
  const tids = readdirSync(`/proc/${pid}/task`);
  const out: Buffer[] = [];
  const st: ChildProcess = spawn(
    'strace',
    ['-e', 'trace=fcntl,pipe2', ...tids.flatMap((t) => ['-p', t])],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  st.stderr?.on('data', (d: Buffer) => out.push(d));
  cleanup.push(() => st.kill('SIGKILL'));
  await waitFor(() =>
    tids.every((t) =>
      /TracerPid:\s+[1-9]/.test(readFileSync(`/proc/${pid}/task/${t}/status`, 'utf8')),
    ),
  );
  return async () => {
    const exited = new Promise((r) => st.once('exit', r));
    st.kill('SIGINT');
    await exited;
    return Buffer.concat(out).toString().split('\n');
  };
}

/** The sizes the helper set with F_SETPIPE_SZ, in order. */
function grown(lines: string[]): number[] {
  return lines
    .map((l) => /F_SETPIPE_SZ, (\d+)\) = \d+/.exec(l))
    .filter((m) => m !== null)
    .map((m) => Number(m[1]));
}

describe.skipIf(!HAS_CC)("the TCP helper's pipes", () => {
  it('carry 8 MiB each way whole and in order through grown pipes, with a slow reader', async () => {
    const { host, port } = await proxy();
    expect(await echoBulk(host, port, 8 << 20, true)).toBe(true);
    expect(await echoBulk(host, port, 3 << 20)).toBe(true);
  });

  it.skipIf(!HAS_STRACE)(
    `grow to 1 MiB once a direction turns bulk; a short connection makes none${NO_STRACE}`,
    async () => {
      const { host, port, f } = await proxy();
      expect(await echoBulk(host, port, 1000)).toBe(true); // the helper is up and warm
      const stop = await traceHelper(f.helperPid() as number);
      for (let i = 0; i < 5; i++) expect(await echoBulk(host, port, 2000)).toBe(true);
      expect(await echoBulk(host, port, 4 << 20)).toBe(true);
      const lines = await stop();
      // One pipe per direction of the bulk connection, none for the five short ones...
      expect(lines.filter((l) => l.includes('pipe2(')).length).toBe(2);
      // ...and each grown to 1 MiB.
      expect(grown(lines)).toEqual([1 << 20, 1 << 20]);
    },
  );

  it.skipIf(!HAS_STRACE)(
    `share a budget: past it a smaller pipe, and a closed connection gives its share back${NO_STRACE}`,
    async () => {
      // 1.25 MiB: the first direction takes 1 MiB, the second fits only 256 KiB.
      const { host, port, f } = await proxy(['--pipe-budget', String(1.25 * (1 << 20))]);
      expect(await echoBulk(host, port, 1000)).toBe(true);
      const stop = await traceHelper(f.helperPid() as number);
      expect(await echoBulk(host, port, 4 << 20, true)).toBe(true);
      // the first connection's close is the helper's to see: the next one finds the budget back
      await new Promise((r) => setTimeout(r, 200));
      expect(await echoBulk(host, port, 4 << 20)).toBe(true);
      const sizes = grown(await stop());
      expect(sizes).toEqual([1 << 20, 1 << 18, 1 << 20, 1 << 18]);
    },
  );

  it.skipIf(!HAS_STRACE)(
    `keep the kernel's size with --pipe-bytes 0, and still carry the bytes${NO_STRACE}`,
    async () => {
      const { host, port, f } = await proxy(['--pipe-bytes', '0']);
      expect(await echoBulk(host, port, 1000)).toBe(true);
      const stop = await traceHelper(f.helperPid() as number);
      expect(await echoBulk(host, port, 4 << 20, true)).toBe(true);
      const lines = await stop();
      expect(lines.filter((l) => l.includes('pipe2(')).length).toBe(2);
      expect(grown(lines)).toEqual([]);
    },
  );
});
