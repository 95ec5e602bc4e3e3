/**
 * The TCP helper's dial that completed inside connect(2): on loopback the handshake is done when
 * connect says EINPROGRESS, so the helper asks at once (poll, no wait) and relays in the turn that
 * accepted the client, instead of registering EPOLLOUT and waiting a turn for it. And the end of
 * stream taken from EPOLLRDHUP with a short read. Behaviour around both stays: a refused dial is a
 * failure the schedule retries, a server that speaks first and closes is relayed whole.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import type net from 'node:net';
import { createProxySocketFactory, servicePortNameString } from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import type { TcpTestServer } from '../../core/src/test-support/echo-servers.js';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { connectTcp, readToEnd } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { type NativeTcpFactory, withNativeTcp } from './index.js';
import {
  HAS_CC,
  HAS_STRACE,
  proxyInTest,
  randomLoopback,
  startBackend,
  useCleanup,
} from './test-support/native-tests.js';

const cleanup = useCleanup();
/** Why the epoll-registration test is skipped where strace is missing (.ci/run installs it). */
const NO_STRACE = HAS_STRACE
  ? ''
  : ' (skipped: no strace on this machine to count epoll_ctl calls)';
const servicePort = { namespace: 'ns', name: 'web', port: 'http', protocol: 'TCP' as const };
const key = servicePortNameString(servicePort);

function backend(onConnection?: (socket: net.Socket) => void): Promise<TcpTestServer> {
  return startBackend(cleanup, onConnection);
}

async function proxy(
  endpoints: string[],
): Promise<{ host: string; port: number; f: NativeTcpFactory }> {
  const f = withNativeTcp(createProxySocketFactory(), { threads: 1, dialTimeoutsMs: [2000, 2000] });
  cleanup.push(() => f.close());
  const ctx = createSocketContext({
    loadBalancer: new FakeLoadBalancer({ [key]: endpoints }),
    protocol: 'TCP',
    ip: randomLoopback(),
    servicePort,
  });
  const socket = await f(ctx);
  proxyInTest(socket, ctx, fakeServiceInfo(), cleanup);
  return { host: socket.addr().address, port: socket.addr().port, f };
}

async function echoOnce(host: string, port: number, text: string): Promise<string> {
  const c = await connectTcp(port, host);
  c.end(text);
  const { data, ended } = await readToEnd(c);
  c.destroy();
  return `${data.toString()} ${ended}`;
}

describe.skipIf(!HAS_CC)('a dial that connected inside connect(2)', () => {
  it.skipIf(!HAS_STRACE)(
    `is relayed at once: no EPOLLOUT registered for a loopback dial${NO_STRACE}`,
    async () => {
      const b = await backend();
      const { host, port, f } = await proxy([b.endpoint]);
      expect(await echoOnce(host, port, 'warm')).toBe('warm end');
      const pid = f.helperPid() as number;
      const tids = readdirSync(`/proc/${pid}/task`);
      const out: Buffer[] = [];
      const st = spawn('strace', ['-e', 'trace=epoll_ctl', ...tids.flatMap((t) => ['-p', t])], {
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      st.stderr.on('data', (d: Buffer) => out.push(d));
      cleanup.push(() => st.kill('SIGKILL'));
      await waitFor(() =>
        tids.every((t) =>
          /TracerPid:\s+[1-9]/.test(readFileSync(`/proc/${pid}/task/${t}/status`, 'utf8')),
        ),
      );
      const N = 20;
      for (let i = 0; i < N; i++) expect(await echoOnce(host, port, `hi ${i}`)).toBe(`hi ${i} end`);
      const exited = new Promise((r) => st.once('exit', r));
      st.kill('SIGINT');
      await exited;
      const lines = Buffer.concat(out).toString().split('\n');
      const adds = lines.filter((l) => l.includes('EPOLL_CTL_ADD'));
      // Every connection registers its client and its endpoint for reading...
      expect(adds.length).toBeGreaterThanOrEqual(N);
      // ...and on loopback none waits for EPOLLOUT: connect(2) finished the handshake. (Before: N.)
      // A softirq left to ksoftirqd on a busy host can leave a handshake unfinished: allow two.
      expect(adds.filter((l) => l.includes('EPOLLOUT')).length).toBeLessThanOrEqual(2);
    },
  );

  it('still reports a refused endpoint as a failed attempt, and the schedule goes on', async () => {
    const good = await backend();
    const gone = await backend();
    const refused = gone.endpoint;
    await gone.close();
    const { host, port } = await proxy([refused, good.endpoint]);
    expect(await echoOnce(host, port, 'retried')).toBe('retried end');
  });

  it('relays a server that speaks first and closes, whole, with its FIN', async () => {
    const big = Buffer.alloc(300_000, 7); // past the copy buffer: the direction splices
    const b = await backend((s) => {
      s.write('hello ');
      s.end(big);
    });
    const { host, port } = await proxy([b.endpoint]);
    for (let i = 0; i < 5; i++) {
      const c = await connectTcp(port, host);
      const { data, ended } = await readToEnd(c);
      c.destroy();
      expect(ended).toBe('end');
      expect(data.length).toBe(6 + big.length);
      expect(data.subarray(0, 6).toString()).toBe('hello ');
    }
  });

  it('carries an answer and its FIN that arrive together, then the client FIN', async () => {
    const b = await backend((s) => s.on('data', () => s.end('answer')));
    const { host, port } = await proxy([b.endpoint]);
    for (let i = 0; i < 10; i++) {
      const c = await connectTcp(port, host);
      c.write('request');
      const { data, ended } = await readToEnd(c);
      expect(`${data.toString()} ${ended}`).toBe('answer end');
      c.end();
      await waitFor(() => c.destroyed || c.writableFinished);
      c.destroy();
    }
  });
});
