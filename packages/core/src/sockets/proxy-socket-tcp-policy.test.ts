import net from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CHANNELS, type RefusedMessage } from '../diagnostics.js';
import { noopLogger } from '../logger.js';
import { startTcpServer, type TcpTestServer } from '../test-support/echo-servers.js';
import { FakeLoadBalancer } from '../test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../test-support/fake-service-info.js';
import { connectTcp, readBytes, readToEnd } from '../test-support/net-clients.js';
import { recordChannel } from '../test-support/record-channel.js';
import { delayConnect } from '../test-support/slow-dial.js';
import { waitFor } from '../test-support/wait-for.js';
import type { AcceptedConnection, AcceptPolicy, AcceptVerdict } from './accept-policy.js';
import { TcpProxySocket, type TcpProxySocketOptions } from './proxy-socket-tcp.js';
import { createSocketContext, type StandaloneSocketContext } from './socket-context.js';

const svc = { namespace: 'ns', name: 'hold', port: 'p', protocol: 'TCP' as const };
const KEY = 'ns/hold:p';
const HOST = '127.1.4.11';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

function record<T>(channel: string): T[] {
  return recordChannel<T>(channel, (fn) => cleanup.push(fn));
}

async function echo(): Promise<TcpTestServer> {
  const s = await startTcpServer({ host: '127.1.4.12' });
  cleanup.push(() => s.close());
  return s;
}

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

async function open(
  policy: AcceptPolicy | ((context: StandaloneSocketContext) => AcceptPolicy),
  endpoints: string[] = [],
  opts: TcpProxySocketOptions = {},
): Promise<{ socket: TcpProxySocket; lb: FakeLoadBalancer; context: StandaloneSocketContext }> {
  const lb = new FakeLoadBalancer({ [KEY]: endpoints });
  const context = createSocketContext({ loadBalancer: lb, ip: HOST, servicePort: svc });
  const socket = await TcpProxySocket.open(context, {
    ...opts,
    acceptPolicy: (ctx) =>
      typeof policy === 'function' ? policy(ctx as StandaloneSocketContext) : policy,
  });
  cleanup.push(() => socket.close());
  void socket.proxyLoop(fakeServiceInfo());
  return { socket, lb, context };
}

async function client(socket: TcpProxySocket): Promise<net.Socket> {
  const c = await connectTcp(socket.addr().port, HOST);
  c.on('error', () => {});
  cleanup.push(() => c.destroy());
  return c;
}

describe('TcpProxySocket accept policy', () => {
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
    expect(held.proxy()).toBe(true);
    expect(held.proxy()).toBe(false);
    c.write('and later');
    expect((await readBytes(c, 21)).toString()).toBe('GET / early\nand later');
    expect(held.state).toBe('relaying');
  });

  it('keeps reading a handed-over client while its dial is in flight, its FIN carried after', async () => {
    const backend = await echo();
    const policy = new RecordingPolicy('hold');
    let connected = false;
    const { socket, lb } = await open(policy, [], {
      connect: (options) =>
        delayConnect(net.connect(options), 150, () => {
          connected = true;
        }),
    });
    const c = await client(socket);
    c.write('early ');
    await waitFor(() => policy.seen[0]?.heldBytes === 6, 5_000, 'early bytes held');
    lb.setEndpoints(KEY, [backend.endpoint]);
    const held = policy.seen[0] as AcceptedConnection;
    expect(held.proxy()).toBe(true);
    c.end('while dialling');
    await waitFor(() => held.heldBytes === 20, 5_000, 'read during the dial');
    expect(connected).toBe(false);
    const { data, ended } = await readToEnd(c);
    expect([data.toString(), ended]).toEqual(['early while dialling', 'end']);
  });

  it('keeps the reads of a held client in order, short and long, and delivers them first', async () => {
    const backend = await echo();
    const policy = new RecordingPolicy('hold');
    const { socket, lb } = await open(policy);
    const c = await client(socket);
    const long = Buffer.alloc(3000, 0xe9); // past the copied size, and not ASCII
    c.write(Buffer.from([0xff, 0x00, 0x80]));
    await waitFor(() => policy.seen[0]?.heldBytes === 3, 5_000, 'first read held');
    c.write('second');
    await waitFor(() => policy.seen[0]?.heldBytes === 9, 5_000, 'second read held');
    c.write(long);
    await waitFor(() => policy.seen[0]?.heldBytes === 3009, 5_000, 'third read held');
    lb.setEndpoints(KEY, [backend.endpoint]);
    policy.seen[0]?.proxy();
    const echoed = await readBytes(c, 3009);
    expect(echoed.subarray(0, 9)).toEqual(
      Buffer.concat([Buffer.from([0xff, 0, 0x80]), Buffer.from('second')]),
    );
    expect(echoed.subarray(9)).toEqual(long);
  });

  it('carries a FIN with nothing sent once the hand-over dials (dropped only while held)', async () => {
    const backend = await echo();
    const policy = new RecordingPolicy('hold');
    const { socket, lb } = await open(policy, [], {
      connect: (options) => delayConnect(net.connect(options), 150, () => {}),
    });
    const c = await client(socket);
    await waitFor(() => policy.seen[0]?.state === 'held', 5_000, 'held');
    lb.setEndpoints(KEY, [backend.endpoint]);
    const ends: boolean[] = [];
    expect(policy.seen[0]?.proxy((ok) => ends.push(ok))).toBe(true);
    c.end();
    const { data, ended } = await readToEnd(c);
    expect([data.toString(), ended]).toEqual(['', 'end']);
    expect(ends).toEqual([true]);
  });

  it('drops a handed-over client that goes away while its dial is in flight, at once', async () => {
    const backend = await echo();
    const policy = new RecordingPolicy('hold');
    let connected = false;
    const { socket, lb } = await open(policy, [], {
      connect: (options) =>
        delayConnect(net.connect(options), 300, () => {
          connected = true;
        }),
    });
    const c = await client(socket);
    c.write('x');
    await waitFor(() => policy.seen[0]?.heldBytes === 1, 5_000, 'held');
    lb.setEndpoints(KEY, [backend.endpoint]);
    const ends: boolean[] = [];
    policy.seen[0]?.proxy((ok) => ends.push(ok));
    c.resetAndDestroy();
    await waitFor(() => ends.length === 1, 5_000, 'dial ended');
    expect(ends).toEqual([false]);
    expect(connected).toBe(false);
    expect(policy.seen[0]?.state).toBe('closed');
    await waitFor(() => socket.activeConnections() === 0, 5_000, 'counted closed');
  });

  it('carries a FIN the client sent while held, after its bytes', async () => {
    const backend = await echo();
    const policy = new RecordingPolicy('hold');
    const { socket, lb } = await open(policy);
    const c = await client(socket);
    c.end('request');
    await waitFor(() => policy.seen[0]?.heldBytes === 7, 5_000, 'request held');
    lb.setEndpoints(KEY, [backend.endpoint]);
    policy.seen[0]?.proxy();
    const { data, ended } = await readToEnd(c);
    expect([data.toString(), ended]).toEqual(['request', 'end']);
  });

  it('drops a held connection at once when its client goes away, and tells onClose', async () => {
    const policy = new RecordingPolicy('hold');
    const { socket } = await open(policy);
    const c = await client(socket);
    await waitFor(() => policy.seen.length === 1, 5_000, 'accepted');
    const closed: AcceptedConnection[] = [];
    policy.seen[0]?.onClose((conn) => closed.push(conn));
    c.destroy();
    await waitFor(() => closed.length === 1, 5_000, 'onClose of the held connection');
    expect(closed[0]?.state).toBe('closed');
    expect(socket.activeConnections()).toBe(0);
    expect(policy.seen[0]?.proxy()).toBe(false);
  });

  it('refuses: at once by verdict, or later with RST for a held client that sent bytes', async () => {
    const refused = record<RefusedMessage>(CHANNELS.refused);
    const policy = new RecordingPolicy('refuse');
    const { socket } = await open(policy);
    const first = await readToEnd(await client(socket));
    expect(first.data.length).toBe(0);
    policy.verdict = 'hold';
    const c = await client(socket);
    c.write('unanswered');
    await waitFor(() => policy.seen[1]?.heldBytes === 10, 5_000, 'held');
    const ends = readToEnd(c);
    expect(policy.seen[1]?.refuse('hold-timeout')).toBe(true);
    expect((await ends).ended).toBe('ECONNRESET');
    expect(refused.map((m) => [m.reason, m.detail])).toEqual([
      ['policy', 'policy'],
      ['policy', 'hold-timeout'],
    ]);
    await waitFor(() => socket.activeConnections() === 0, 5_000, 'both released');
  });

  it('refuses the client, and logs, when the policy throws', async () => {
    const error = vi.fn();
    const lb = new FakeLoadBalancer({ [KEY]: [] });
    const logger = { ...noopLogger, error };
    const context = createSocketContext({ loadBalancer: lb, ip: HOST, servicePort: svc, logger });
    const socket = await TcpProxySocket.open(context, {
      acceptPolicy: () => ({
        accept: () => {
          throw new Error('policy bug');
        },
      }),
    });
    cleanup.push(() => socket.close());
    void socket.proxyLoop(fakeServiceInfo());
    const { ended } = await readToEnd(await client(socket));
    expect(ended).toBe('end');
    expect(error).toHaveBeenCalledTimes(1);
    expect(socket.activeConnections()).toBe(0);
  });

  it('bounds what a held client can make the proxy buffer', async () => {
    const policy = new RecordingPolicy('hold');
    const { socket } = await open(policy, [], { holdBufferBytes: 1024 });
    const c = await client(socket);
    c.write(Buffer.alloc(256 * 1024));
    await waitFor(() => (policy.seen[0]?.heldBytes ?? 0) >= 1024, 5_000, 'the cap reached');
    // Reading stopped at the cap: at most the one read that crossed it is kept (64 KiB at most).
    expect(policy.seen[0]?.heldBytes).toBeLessThanOrEqual(1024 + 65_536);
  });

  it('is a few lines for a limit of concurrent connections', async () => {
    const backend = await echo();
    const limit = (max: number): AcceptPolicy => {
      let open = 0;
      return {
        accept(connection) {
          if (open >= max) return 'refuse';
          open++;
          connection.onClose(() => open--);
          return 'proxy';
        },
      };
    };
    const { socket } = await open(limit(1), [backend.endpoint]);
    const a = await client(socket);
    a.write('a');
    expect((await readBytes(a, 1)).toString()).toBe('a');
    expect((await readToEnd(await client(socket))).data.length).toBe(0);
    a.destroy();
    await waitFor(() => socket.activeConnections() === 0, 5_000, 'a released');
    const c = await client(socket);
    c.write('c');
    expect((await readBytes(c, 1)).toString()).toBe('c');
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
    const c = await client(socket);
    c.write('wake');
    await waitFor(() => socket.activeConnections() === 1, 5_000, 'held');
    lb.setEndpoints(KEY, [backend.endpoint]);
    context.notifyEndpointsChanged();
    expect((await readBytes(c, 4)).toString()).toBe('wake');
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
    policy.seen[0]?.refuse();
    await idle;
    expect((await readToEnd(c)).ended).toBe('end');
  });
});
