import { spawn } from 'node:child_process';
import net from 'node:net';
import {
  type AcceptedConnection,
  type AcceptPolicy,
  type AcceptVerdict,
  createProxySocketFactory,
  noopLogger,
  type ProxySocket,
  servicePortNameString,
} from '@userspace-proxy/core';
import { CHANNELS, type RefusedMessage } from '@userspace-proxy/core/diagnostics';
import { createSocketContext, type StandaloneSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it, vi } from 'vitest';
import { startTcpServer, type TcpTestServer } from '../../core/src/test-support/echo-servers.js';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { connectTcp, readBytes, readToEnd } from '../../core/src/test-support/net-clients.js';
import { recordChannel } from '../../core/src/test-support/record-channel.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { type NativeTcpFactory, type NativeTcpOptions, withNativeTcp } from './index.js';
import { HAS_CC, randomLoopback as loopback, useCleanup } from './test-support/native-tests.js';

// Core's accept-policy tests of its TCP socket (proxy-socket-tcp-policy.test.ts), on the native
// socket: the helper holds, Node decides.

const servicePort = { namespace: 'ns', name: 'hold', port: 'p', protocol: 'TCP' as const };
const KEY = servicePortNameString(servicePort);

const cleanup = useCleanup();

async function echo(): Promise<TcpTestServer> {
  const s = await startTcpServer({ host: loopback() });
  cleanup.push(() => s.close());
  return s;
}

/**
 * An endpoint whose dials stay in flight for about `stallMs`, then connect (at the SYN's retransmit)
 * and echo: a child listens with a backlog of 1 and blocks its event loop, two connections fill
 * its accept queue, and the kernel drops further SYNs until the child accepts again.
 */
async function stalledEndpoint(stallMs: number): Promise<string> {
  const host = loopback();
  const script = `
    const net = require('node:net');
    const s = net.createServer({ allowHalfOpen: true }, (c) => { c.on('error', () => {}); c.pipe(c); });
    s.listen({ host: ${JSON.stringify(host)}, port: 0, backlog: 1 }, () => {
      process.stdout.write(String(s.address().port) + '\\n');
      process.stdin.once('data', () => {
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ${stallMs});
      });
    });`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
  cleanup.push(() => child.kill('SIGKILL'));
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout.once('data', (d: Buffer) => resolve(Number.parseInt(d.toString(), 10)));
    child.once('exit', () => reject(new Error('the stalled endpoint exited')));
  });
  child.stdin.write('block\n');
  await new Promise((resolve) => setTimeout(resolve, 100)); // blocked now
  const fillers: net.Socket[] = [];
  for (let i = 0; i < 2; i++) {
    const f = await connectTcp(port, host);
    f.on('error', () => {});
    fillers.push(f);
  }
  cleanup.push(() => {
    for (const f of fillers) f.destroy();
  });
  return `${host}:${port}`;
}

/** The native socket has both of ProxySocket's optional counters. */
type CountingSocket = ProxySocket & Required<Pick<ProxySocket, 'activeConnections' | 'idle'>>;

/** A policy that answers `verdict` and keeps every connection it sees. */
class RecordingPolicy implements AcceptPolicy {
  readonly seen: AcceptedConnection[] = [];
  closed = 0;
  constructor(public verdict: AcceptVerdict | (() => AcceptVerdict)) {}
  accept(connection: AcceptedConnection): AcceptVerdict {
    this.seen.push(connection);
    return typeof this.verdict === 'function' ? this.verdict() : this.verdict;
  }
  close(): void {
    this.closed++;
  }
}

function factory(options: NativeTcpOptions = {}): NativeTcpFactory {
  const f = withNativeTcp(createProxySocketFactory(), { threads: 2, ...options });
  cleanup.push(() => f.close());
  return f;
}

async function open(
  policy: AcceptPolicy | ((context: StandaloneSocketContext) => AcceptPolicy),
  endpoints: string[] = [],
  opts: NativeTcpOptions = {},
  logger = noopLogger,
): Promise<{
  socket: CountingSocket;
  lb: FakeLoadBalancer;
  context: StandaloneSocketContext;
  native: NativeTcpFactory;
}> {
  const lb = new FakeLoadBalancer({ [KEY]: endpoints });
  const context = createSocketContext({ loadBalancer: lb, ip: loopback(), servicePort, logger });
  const native = factory(opts);
  const f = native.withAcceptPolicy((ctx) =>
    typeof policy === 'function' ? policy(ctx as StandaloneSocketContext) : policy,
  );
  const socket = (await f(context)) as CountingSocket;
  cleanup.push(() => socket.close());
  void socket.proxyLoop(fakeServiceInfo());
  return { socket, lb, context, native };
}

async function client(socket: ProxySocket): Promise<net.Socket> {
  const c = await connectTcp(socket.addr().port, socket.addr().address);
  c.on('error', () => {});
  cleanup.push(() => c.destroy());
  return c;
}

describe.skipIf(!HAS_CC)('NativeTcpProxySocket accept policy', () => {
  it('holds a connection, keeps its early bytes, and delivers them first after proxy()', async () => {
    const backend = await echo();
    const policy = new RecordingPolicy('hold');
    const { socket, lb } = await open(policy);
    const c = await client(socket);
    c.write('GET / early\n');
    await waitFor(() => policy.seen[0]?.heldBytes === 12, 5_000, 'early bytes held');
    const held = policy.seen[0] as AcceptedConnection;
    expect(held.state).toBe('held');
    expect(socket.activeConnections()).toBe(1);
    lb.setEndpoints(KEY, [backend.endpoint]);
    const ends: boolean[] = [];
    expect(held.proxy((ok) => ends.push(ok))).toBe(true);
    expect(held.proxy()).toBe(false);
    c.write('and later');
    expect((await readBytes(c, 21)).toString()).toBe('GET / early\nand later');
    expect(held.state).toBe('relaying');
    expect(held.endpoint).toBe(backend.endpoint);
    expect(ends).toEqual([true]);
  });

  it('keeps reading a handed-over client while its dial is in flight, its FIN carried after', async () => {
    const endpoint = await stalledEndpoint(1500);
    const policy = new RecordingPolicy('hold');
    const { socket, lb } = await open(policy, [], { dialTimeoutsMs: [10_000] });
    const c = await client(socket);
    c.write('early ');
    await waitFor(() => policy.seen[0]?.heldBytes === 6, 5_000, 'early bytes held');
    lb.setEndpoints(KEY, [endpoint]);
    const held = policy.seen[0] as AcceptedConnection;
    const ends: boolean[] = [];
    expect(held.proxy((ok) => ends.push(ok))).toBe(true);
    c.end('while dialling');
    await waitFor(() => held.heldBytes === 20, 5_000, 'read during the dial');
    expect([held.state, ends]).toEqual(['dialling', []]);
    const { data, ended } = await readToEnd(c);
    expect([data.toString(), ended]).toEqual(['early while dialling', 'end']);
    expect(ends).toEqual([true]);
  }, 20_000);

  it('drops a handed-over client that goes away while its dial is in flight, at once', async () => {
    const endpoint = await stalledEndpoint(3000);
    const policy = new RecordingPolicy('hold');
    const { socket, lb } = await open(policy, [], { dialTimeoutsMs: [10_000] });
    const c = await client(socket);
    c.write('x');
    await waitFor(() => policy.seen[0]?.heldBytes === 1, 5_000, 'held');
    lb.setEndpoints(KEY, [endpoint]);
    const ends: boolean[] = [];
    policy.seen[0]?.proxy((ok) => ends.push(ok));
    c.resetAndDestroy();
    await waitFor(() => ends.length === 1, 2_000, 'dial ended, before the endpoint accepts');
    expect(ends).toEqual([false]);
    expect(policy.seen[0]?.state).toBe('closed');
    await waitFor(() => socket.activeConnections() === 0, 5_000, 'counted closed');
  }, 20_000);

  it('ends a hand-over dial in flight at once when the helper dies, held clients with it', async () => {
    const endpoint = await stalledEndpoint(5000);
    const policy = new RecordingPolicy('hold');
    const { socket, lb, native } = await open(policy, [], {
      dialTimeoutsMs: [10_000],
      restartBackoffMs: 50,
    });
    const dialling = await client(socket);
    const waiting = await client(socket);
    await waitFor(() => policy.seen.length === 2, 5_000, 'both held');
    lb.setEndpoints(KEY, [endpoint]);
    const ends: boolean[] = [];
    policy.seen[0]?.proxy((ok) => ends.push(ok));
    const closes = [readToEnd(dialling), readToEnd(waiting)];
    process.kill(native.helperPid() as number, 'SIGKILL');
    await waitFor(() => ends.length === 1, 2_000, 'the dial ended, not at its 10 s timeout');
    expect(ends).toEqual([false]);
    await Promise.all(closes);
    expect(policy.seen.map((c) => c.state)).toEqual(['closed', 'closed']);
    await waitFor(() => socket.activeConnections() === 0, 5_000, 'counted closed');
  }, 20_000);

  it('resets a held client whose bytes it read when the helper dies, and closes a silent one', async () => {
    const policy = new RecordingPolicy('hold');
    const { socket, native } = await open(policy, [], { restartBackoffMs: 50 });
    const asked = await client(socket);
    const silent = await client(socket);
    asked.write('GET / HTTP/1.0\r\n\r\n');
    await waitFor(() => policy.seen.length === 2, 5_000, 'both held');
    await waitFor(() => policy.seen.some((c) => c.heldBytes > 0), 5_000, 'the request held');
    const ends = [readToEnd(asked), readToEnd(silent)];
    process.kill(native.helperPid() as number, 'SIGKILL');
    const [a, b] = await Promise.all(ends);
    // A FIN after a request would read as a complete, empty answer.
    expect(a?.ended).toBe('ECONNRESET');
    expect(b?.ended).not.toBe('ECONNRESET');
  }, 20_000);

  it('carries a FIN the client sent while held, after its bytes', async () => {
    const backend = await echo();
    const policy = new RecordingPolicy('hold');
    const { socket, lb } = await open(policy);
    const c = await client(socket);
    c.end('request');
    await waitFor(() => policy.seen[0]?.heldBytes === 7, 5_000, 'request held');
    // Held on after its FIN: it may be waiting for the answer.
    expect(policy.seen[0]?.state).toBe('held');
    lb.setEndpoints(KEY, [backend.endpoint]);
    policy.seen[0]?.proxy();
    const { data, ended } = await readToEnd(c);
    expect([data.toString(), ended]).toEqual(['request', 'end']);
  });

  it('drops a held connection at once when its client goes away, and tells onClose', async () => {
    const policy = new RecordingPolicy('hold');
    const { socket } = await open(policy);
    for (const how of ['fin', 'reset', 'reset-after-bytes'] as const) {
      const n = policy.seen.length;
      const c = await client(socket);
      await waitFor(() => policy.seen.length === n + 1, 5_000, 'accepted');
      const held = policy.seen[n] as AcceptedConnection;
      const closed: AcceptedConnection[] = [];
      held.onClose((conn) => closed.push(conn));
      if (how === 'fin') c.end();
      else if (how === 'reset') c.resetAndDestroy();
      else {
        c.write('x');
        await waitFor(() => held.heldBytes === 1, 5_000, 'a byte held');
        c.resetAndDestroy();
      }
      await waitFor(() => closed.length === 1, 5_000, `onClose of the held connection (${how})`);
      expect(closed[0]?.state).toBe('closed');
      await waitFor(() => socket.activeConnections() === 0, 5_000, 'counted closed');
      expect(held.proxy()).toBe(false);
    }
  });

  it('refuses: at once by verdict, or later with RST for a held client that sent bytes', async () => {
    const refused = recordChannel<RefusedMessage>(CHANNELS.refused, (fn) => cleanup.push(fn));
    const policy = new RecordingPolicy('refuse');
    const { socket } = await open(policy);
    const first = await readToEnd(await client(socket));
    expect(first.data.length).toBe(0);
    expect(first.ended).toBe('end');
    policy.verdict = 'hold';
    const c = await client(socket);
    c.write('unanswered');
    await waitFor(() => policy.seen[1]?.heldBytes === 10, 5_000, 'held');
    const ends = readToEnd(c);
    const closed: string[] = [];
    policy.seen[1]?.onClose((conn) => closed.push(conn.state));
    expect(policy.seen[1]?.refuse('hold-timeout')).toBe(true);
    expect(closed).toEqual(['closed']); // at once, as core's socket
    expect(policy.seen[1]?.refuse()).toBe(false);
    expect((await ends).ended).toBe('ECONNRESET');
    // A held client with nothing sent gets a FIN.
    const quiet = await client(socket);
    await waitFor(() => policy.seen.length === 3, 5_000, 'the third held');
    const quietEnd = readToEnd(quiet);
    policy.seen[2]?.refuse();
    expect((await quietEnd).ended).toBe('end');
    expect(refused.filter((m) => m.service === KEY).map((m) => [m.reason, m.detail])).toEqual([
      ['policy', 'policy'],
      ['policy', 'hold-timeout'],
      ['policy', 'policy'],
    ]);
    await waitFor(() => socket.activeConnections() === 0, 5_000, 'all released');
  });

  it('closes a relaying connection on refuse() without counting a refusal, as core does', async () => {
    const backend = await echo();
    const refused = recordChannel<RefusedMessage>(CHANNELS.refused, (fn) => cleanup.push(fn));
    const policy = new RecordingPolicy('proxy');
    const { socket } = await open(policy, [backend.endpoint]);
    const c = await client(socket);
    c.write('ping');
    expect((await readBytes(c, 4)).toString()).toBe('ping');
    const relayed = policy.seen[0] as AcceptedConnection;
    await waitFor(() => relayed.state === 'relaying', 5_000, 'relaying');
    const ends = readToEnd(c);
    expect(relayed.refuse()).toBe(true);
    expect((await ends).ended).toBe('end');
    await waitFor(() => relayed.state === 'closed', 5_000, 'closed');
    expect(refused.filter((m) => m.service === KEY)).toEqual([]);
  });

  it('refuses the client, and logs, when the policy throws', async () => {
    const error = vi.fn();
    const { socket } = await open(
      {
        accept: () => {
          throw new Error('policy bug');
        },
      },
      [],
      {},
      { ...noopLogger, error },
    );
    const { ended } = await readToEnd(await client(socket));
    expect(ended).toBe('end');
    expect(error).toHaveBeenCalledTimes(1);
    await waitFor(() => socket.activeConnections() === 0, 5_000, 'released');
  });

  it('bounds what a held client can make the helper buffer, exactly', async () => {
    const policy = new RecordingPolicy('hold');
    const { socket } = await open(policy, [], { holdBufferBytes: 1024 });
    const c = await client(socket);
    c.write(Buffer.alloc(256 * 1024));
    await waitFor(() => (policy.seen[0]?.heldBytes ?? 0) >= 1024, 5_000, 'the cap reached');
    expect(policy.seen[0]?.heldBytes).toBe(1024);
    // Still watched at the cap: a reset is seen at once.
    const closed: string[] = [];
    policy.seen[0]?.onClose((conn) => closed.push(conn.state));
    c.resetAndDestroy();
    await waitFor(() => closed.length === 1, 5_000, 'the reset seen at the cap');
  });

  it('closes the client only when every dial of a hand-over fails, and says so to onDialEnd', async () => {
    const policy = new RecordingPolicy('hold');
    const { socket, lb } = await open(policy, [], { dialTimeoutsMs: [500, 500] });
    const c = await client(socket);
    c.write('x');
    await waitFor(() => policy.seen[0]?.heldBytes === 1, 5_000, 'held');
    // Nothing listens there: every attempt is refused.
    const dead = net.createServer();
    await new Promise<void>((resolve) => dead.listen(0, '127.0.0.1', resolve));
    const { port } = dead.address() as net.AddressInfo;
    await new Promise((resolve) => dead.close(resolve));
    lb.setEndpoints(KEY, [`127.0.0.1:${port}`]);
    const ends: boolean[] = [];
    const done = readToEnd(c);
    policy.seen[0]?.proxy((ok) => ends.push(ok));
    await done;
    expect(ends).toEqual([false]);
    expect(policy.seen[0]?.state).toBe('closed');
    await waitFor(() => socket.activeConnections() === 0, 5_000, 'released');
  });

  it('lets a policy hand held connections over when the endpoints-changed signal comes', async () => {
    const backend = await echo();
    const { socket, lb, context } = await open((ctx) => {
      const held: AcceptedConnection[] = [];
      ctx.onEndpointsChanged(({ hasEndpoints }) => {
        if (hasEndpoints) for (const conn of held.splice(0)) conn.proxy();
      });
      return {
        accept: (conn) => {
          if (ctx.loadBalancer.serviceHasEndpoints(ctx.servicePort)) return 'proxy';
          held.push(conn);
          return 'hold';
        },
      };
    });
    const clients = await Promise.all([1, 2, 3].map(() => client(socket)));
    for (const c of clients) c.write('wake');
    await waitFor(() => socket.activeConnections() === 3, 5_000, 'held');
    lb.setEndpoints(KEY, [backend.endpoint]);
    context.notifyEndpointsChanged();
    for (const c of clients) expect((await readBytes(c, 4)).toString()).toBe('wake');
    // Proxied at once now that there are endpoints.
    const late = await client(socket);
    late.write('late');
    expect((await readBytes(late, 4)).toString()).toBe('late');
  });

  it('closes its policy with the socket, and closes held connections only by the policy', async () => {
    const policy = new RecordingPolicy('hold');
    const { socket } = await open(policy);
    const c = await client(socket);
    await waitFor(() => policy.seen.length === 1, 5_000, 'accepted');
    await socket.close();
    expect(policy.closed).toBe(1);
    expect(policy.seen[0]?.state).toBe('held');
    const idle = socket.idle();
    // Read from now: the FIN may come before `idle` resolves (the helper's 'c' follows it).
    const ends = readToEnd(c);
    policy.seen[0]?.refuse();
    await idle;
    expect((await ends).ended).toBe('end');
  });

  it('counts held clients against maxHelperConnections', async () => {
    const policy = new RecordingPolicy('hold');
    const refused = recordChannel<RefusedMessage>(CHANNELS.refused, (fn) => cleanup.push(fn));
    const { socket } = await open(policy, [], { maxHelperConnections: 2 });
    await client(socket);
    await client(socket);
    await waitFor(() => policy.seen.length === 2, 5_000, 'two held');
    // Reset at accept: the connect itself may see the RST.
    const raw = net.connect({ host: socket.addr().address, port: socket.addr().port });
    cleanup.push(() => raw.destroy());
    expect((await readToEnd(raw)).ended).toBe('ECONNRESET');
    await waitFor(
      () => refused.some((m) => m.service === KEY && m.reason === 'connection-limit'),
      5_000,
      'the refusal at the cap',
    );
    expect(policy.seen.length).toBe(2);
  });
});
