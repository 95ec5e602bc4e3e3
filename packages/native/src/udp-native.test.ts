import { randomBytes } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import {
  createProxySocketFactory,
  type Endpoints,
  type ProxySocket,
  RoundRobinLoadBalancer,
  servicePortNameString,
} from '@userspace-proxy/core';
import { CHANNELS, type RefusedMessage } from '@userspace-proxy/core/diagnostics';
import {
  createServiceInfo,
  createSocketContext,
  splitHostPort,
} from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import {
  startUdpEchoServer,
  type UdpEchoServer,
} from '../../core/src/test-support/echo-servers.js';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { type UdpTestClient, udpClient } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { type NativeUdpFactory, type NativeUdpOptions, withNativeUdp } from './index.js';
import {
  HAS_CC,
  picksSettled,
  proxyInTest,
  randomLoopback,
  useCleanup,
} from './test-support/native-tests.js';
import type { NativeUdpProxySocket } from './udp-proxy-socket.js';

const cleanup = useCleanup();

const servicePort = { namespace: 'ns', name: 'dns', port: 'dns', protocol: 'UDP' as const };
const key = servicePortNameString(servicePort);

async function backend(prefix?: string): Promise<UdpEchoServer> {
  const s = await startUdpEchoServer({
    host: randomLoopback(),
    ...(prefix !== undefined ? { prefix } : {}),
  });
  cleanup.push(() => s.close());
  return s;
}

async function client(): Promise<UdpTestClient> {
  const c = await udpClient(randomLoopback());
  cleanup.push(() => c.close());
  return c;
}

function factory(options: NativeUdpOptions = {}): NativeUdpFactory {
  const f = withNativeUdp(createProxySocketFactory(), { threads: 2, ...options });
  cleanup.push(() => f.close());
  return f;
}

type Lb = Parameters<typeof createSocketContext>[0]['loadBalancer'];

async function proxy(
  lb: Lb,
  f: NativeUdpFactory = factory(),
  info: Parameters<typeof fakeServiceInfo>[0] = {},
  extra: { allowedSources?: string[] } = {},
): Promise<{ socket: NativeUdpProxySocket; host: string; port: number; f: NativeUdpFactory }> {
  const ctx = createSocketContext({
    loadBalancer: lb,
    protocol: 'UDP',
    ip: randomLoopback(),
    servicePort,
    ...extra,
  });
  const socket = (await f(ctx)) as ProxySocket as NativeUdpProxySocket;
  proxyInTest(socket, ctx, fakeServiceInfo({ protocol: 'UDP', ...info }), cleanup);
  return { socket, host: socket.addr().address, port: socket.addr().port, f };
}

/** Collects the messages of a diagnostics channel until the test ends. */
function collect<T>(channel: string): T[] {
  const got: T[] = [];
  const on = (m: unknown): void => {
    got.push(m as T);
  };
  subscribe(channel, on);
  cleanup.push(async () => unsubscribe(channel, on));
  return got;
}

/** Sends until a reply comes (the first datagrams of a session may wait for its verdict). */
async function ask(c: UdpTestClient, port: number, host: string, data: string): Promise<string> {
  c.send(data, port, host);
  const r = await c.next(5000);
  expect(r.from.address).toBe(host);
  expect(r.from.port).toBe(port);
  return r.data.toString();
}

describe.skipIf(!HAS_CC)('withNativeUdp', () => {
  it('relays datagrams both ways, replies coming from the Service address', async () => {
    const b = await backend();
    const lb = new FakeLoadBalancer({ [key]: [b.endpoint] });
    const { socket, host, port, f } = await proxy(lb);
    const opened = collect<{ client: string; endpoint: string }>(CHANNELS.udpSessionOpen);
    const c = await client();
    for (let i = 0; i < 20; i++) expect(await ask(c, port, host, `ping ${i}`)).toBe(`ping ${i}`);
    expect(socket.sessionCount).toBe(1);
    expect(socket.activeConnections()).toBe(1);
    expect(lb.calls).toHaveLength(1);
    expect(opened).toHaveLength(1);
    expect(opened[0]?.endpoint).toBe(b.endpoint);
    expect(f.counters.sessionsAsked).toBe(1);
    expect(f.helperPid()).toBeDefined();
    // The endpoint sees the helper's upstream socket, not the client.
    expect(b.received[0]?.from).not.toBe(`${c.socket.address().address}:${c.port}`);
  });

  it('spreads clients over the endpoints round robin, one session each', async () => {
    const bs = [await backend('a:'), await backend('b:'), await backend('c:')];
    const lb = new FakeLoadBalancer({ [key]: bs.map((b) => b.endpoint) });
    const { socket, host, port } = await proxy(lb);
    const seen: string[] = [];
    for (let i = 0; i < 6; i++) {
      const c = await client();
      seen.push((await ask(c, port, host, 'x')).slice(0, 2));
      expect(await ask(c, port, host, 'y')).toBe(`${seen[i]}y`);
    }
    expect(seen).toEqual(['a:', 'b:', 'c:', 'a:', 'b:', 'c:']);
    expect(socket.sessionCount).toBe(6);
  });

  it('keeps ClientIP affinity through the verdict path', async () => {
    const bs = [await backend('a:'), await backend('b:')];
    const lb = new FakeLoadBalancer({ [key]: bs.map((b) => b.endpoint) }, { affinity: true });
    const { host, port } = await proxy(lb, factory(), { sessionAffinityType: 'ClientIP' });
    const ip = randomLoopback();
    const firsts: string[] = [];
    for (let i = 0; i < 3; i++) {
      const c = await udpClient(ip); // same address, another port: another session
      cleanup.push(() => c.close());
      firsts.push((await ask(c, port, host, 'x')).slice(0, 2));
    }
    expect(new Set(firsts).size).toBe(1);
    expect(lb.calls.map((c) => c.srcAddr?.address)).toEqual([ip, ip, ip]);
  });

  it("ends a silent session after the ServiceInfo's idle timeout (the helper's timer)", async () => {
    const b = await backend();
    const lb = new FakeLoadBalancer({ [key]: [b.endpoint] });
    const { socket, host, port } = await proxy(lb, factory(), { udpIdleTimeoutMs: 150 });
    const closed = collect<{ datagramsIn: number; datagramsOut: number }>(CHANNELS.udpSessionClose);
    const c = await client();
    expect(await ask(c, port, host, 'one')).toBe('one');
    expect(await ask(c, port, host, 'two')).toBe('two');
    await waitFor(() => socket.sessionCount === 0, 5000, 'the idle session ended');
    await waitFor(() => closed.length === 1, 5000, 'its close published');
    expect(closed[0]).toMatchObject({ datagramsIn: 2, datagramsOut: 2 });
    // The client's next datagram opens a new session.
    expect(await ask(c, port, host, 'three')).toBe('three');
    expect(lb.calls).toHaveLength(2);
  });

  it('caps sessions per socket: datagrams of clients over the cap are dropped and counted', async () => {
    const b = await backend();
    const lb = new FakeLoadBalancer({ [key]: [b.endpoint] });
    const refused = collect<RefusedMessage>(CHANNELS.refused);
    const { socket, host, port, f } = await proxy(
      lb,
      factory({ maxUdpSessions: 2, maxUdpSessionsPerSource: 2 }),
    );
    const c1 = await client();
    const c2 = await client();
    expect(await ask(c1, port, host, '1')).toBe('1');
    expect(await ask(c2, port, host, '2')).toBe('2');
    const c3 = await client();
    for (let i = 0; i < 5; i++) c3.send('3', port, host);
    await waitFor(() => f.counters.droppedAtCap >= 5, 5000, 'the drops reported');
    expect(refused.filter((r) => r.reason === 'udp-session-limit').length).toBeGreaterThanOrEqual(
      5,
    );
    expect(socket.sessionCount).toBe(2);
    // Sessions inside the cap carry on.
    expect(await ask(c1, port, host, 'again')).toBe('again');
  });

  it('caps sessions per source address (maxUdpSessionsPerSource)', async () => {
    const b = await backend();
    const lb = new FakeLoadBalancer({ [key]: [b.endpoint] });
    const { socket, host, port, f } = await proxy(
      lb,
      factory({ maxUdpSessions: 100, maxUdpSessionsPerSource: 1 }),
    );
    const ip = randomLoopback();
    const c1 = await udpClient(ip);
    const c2 = await udpClient(ip);
    cleanup.push(
      () => c1.close(),
      () => c2.close(),
    );
    expect(await ask(c1, port, host, '1')).toBe('1');
    c2.send('2', port, host);
    await waitFor(() => f.counters.droppedAtCap >= 1, 5000, 'the second source session dropped');
    expect(socket.sessionCount).toBe(1);
    expect(await ask(await client(), port, host, 'other')).toBe('other');
  });

  it('relays a 65 507-byte datagram and an empty one intact', async () => {
    const b = await backend();
    const lb = new FakeLoadBalancer({ [key]: [b.endpoint] });
    const { host, port } = await proxy(lb);
    const c = await client();
    const big = randomBytes(65_507);
    c.send(big, port, host);
    const r = await c.next(5000);
    expect(r.data.equals(big)).toBe(true);
    c.send(Buffer.alloc(0), port, host);
    expect((await c.next(5000)).data.length).toBe(0);
    expect(await ask(c, port, host, 'after')).toBe('after');
  });

  it('drops and counts the datagrams of a Service with no endpoints', async () => {
    const lb = new FakeLoadBalancer({ [key]: [] });
    const refused = collect<RefusedMessage>(CHANNELS.refused);
    const { socket, host, port } = await proxy(lb);
    const c = await client();
    for (let i = 0; i < 3; i++) c.send(`x${i}`, port, host);
    await waitFor(
      () => refused.filter((r) => r.reason === 'no-endpoints').length >= 3,
      5000,
      'every datagram refused',
    );
    // Each datagram once, whether it asked Node itself or waited in a refused session's queue.
    expect(refused.filter((r) => r.reason === 'no-endpoints')).toHaveLength(3);
    expect(socket.sessionCount).toBe(0);
    // Endpoints arrive: the next datagram is served.
    const b = await backend();
    lb.setEndpoints(key, [b.endpoint]);
    expect(await ask(c, port, host, 'now')).toBe('now');
  });

  it('drops clients outside the source ranges', async () => {
    const b = await backend();
    const lb = new FakeLoadBalancer({ [key]: [b.endpoint] });
    const refused = collect<RefusedMessage>(CHANNELS.refused);
    const { host, port } = await proxy(lb, factory(), {}, { allowedSources: ['10.0.0.0/8'] });
    const c = await client();
    c.send('x', port, host);
    await waitFor(() => refused.some((r) => r.reason === 'source-range'), 5000, 'refused');
    expect(lb.calls).toHaveLength(0);
  });

  it('ends the sessions of an endpoint that left; new sessions take the new endpoints', async () => {
    const old = await backend('old:');
    const lb = new RoundRobinLoadBalancer({ outlierEjection: { consecutiveFailures: 0 } });
    let current: string[] = [old.endpoint];
    lb.newService(servicePort, 'None', 0);
    lb.onEndpointsAdd(endpointsOf(current));
    const f = factory();
    const ctx = createSocketContext({
      loadBalancer: lb,
      protocol: 'UDP',
      ip: randomLoopback(),
      servicePort,
    });
    const socket = (await f(ctx)) as ProxySocket as NativeUdpProxySocket;
    proxyInTest(socket, ctx, createServiceInfo(ctx, { protocol: 'UDP' }), cleanup);
    const { address: host, port } = socket.addr();
    const settled = (): boolean => picksSettled(socket);
    await waitFor(settled, 5000, 'picks made ahead');
    const c = await client();
    expect(await ask(c, port, host, 'x')).toBe('old:x');
    expect(f.counters.sessionsAhead).toBe(1);
    const fresh = await backend('new:');
    const before = current;
    current = [fresh.endpoint];
    lb.onEndpointsUpdate(endpointsOf(before), endpointsOf(current));
    ctx.notifyEndpointsChanged();
    await waitFor(() => socket.sessionCount === 0, 5000, "the old endpoint's session ended");
    await waitFor(settled, 5000, 'the new picks taken');
    expect(await ask(c, port, host, 'y')).toBe('new:y');
    const other = await client();
    expect(await ask(other, port, host, 'z')).toBe('new:z');
  });

  it('holds more than a thousand sessions in one thread (its tables grow)', async () => {
    const b = await backend();
    const lb = new FakeLoadBalancer({ [key]: [b.endpoint] });
    const { socket, host, port, f } = await proxy(
      lb,
      factory({ threads: 1, maxUdpSessionsPerSource: 4096 }),
    );
    const ip = randomLoopback();
    const clients = await Promise.all(Array.from({ length: 1200 }, () => udpClient(ip)));
    cleanup.push(() => Promise.all(clients.map((c) => c.close())));
    for (const [i, c] of clients.entries()) c.send(`c${i}`, port, host);
    const replies = await Promise.all(
      clients.map(async (c, i) => {
        for (let attempt = 0; ; attempt++) {
          try {
            return (await c.next(1000)).data.toString() === `c${i}`;
          } catch (error) {
            if (attempt >= 4) throw error;
            c.send(`c${i}`, port, host); // a datagram lost in a loaded loopback queue
          }
        }
      }),
    );
    expect(replies.every(Boolean)).toBe(true);
    expect(socket.sessionCount).toBe(1200);
    // Every session is still found by its client and by its id (the verdicts, the close).
    expect(await ask(clients[7] as UdpTestClient, port, host, 'again')).toBe('again');
    expect(f.counters.sessionsAsked).toBe(1200);
    socket.abortConnections();
    await waitFor(() => socket.sessionCount === 0, 5000, 'every session closed by id');
  });

  it('restarts a killed helper, which serves the same port again', async () => {
    const b = await backend();
    const lb = new FakeLoadBalancer({ [key]: [b.endpoint] });
    const { socket, host, port, f } = await proxy(lb, factory({ restartBackoffMs: 20 }));
    const closed = collect<{ bytesIn: number }>(CHANNELS.udpSessionClose);
    const c = await client();
    expect(await ask(c, port, host, 'before')).toBe('before');
    const pid = f.helperPid() as number;
    process.kill(pid, 'SIGKILL');
    await waitFor(() => f.helperPid() !== undefined && f.helperPid() !== pid, 5000, 'restarted');
    expect(socket.sessionCount).toBe(0);
    // The session the helper died with is published closed, its counts lost with the helper.
    expect(closed).toHaveLength(1);
    expect(closed[0]?.bytesIn).toBe(0);
    await waitFor(
      async () => {
        c.send('after', port, host);
        try {
          return (await c.next(200)).data.toString() === 'after';
        } catch {
          return false;
        }
      },
      5000,
      'served again',
    );
    expect(f.counters.helperExits).toBe(1);
    expect(f.counters.helperStarts).toBe(2);
  });

  it('refuses what it does not implement, naming it, and hands TCP to the base factory', async () => {
    const f = factory({ createSocket: () => undefined });
    const lb = new FakeLoadBalancer({ [key]: [] });
    const ctx = createSocketContext({
      loadBalancer: lb,
      protocol: 'UDP',
      ip: '127.0.0.1',
      servicePort,
    });
    await expect(f(ctx)).rejects.toMatchObject({ code: 'ERR_NATIVE_UNSUPPORTED' });
    expect(() => withNativeUdp(createProxySocketFactory(), { maxUdpSessions: 0 })).toThrow(
      /maxUdpSessions/,
    );
    const tcp = createSocketContext({
      loadBalancer: lb,
      protocol: 'TCP',
      ip: randomLoopback(),
      servicePort: { ...servicePort, protocol: 'TCP' },
    });
    const s = await factory()(tcp);
    cleanup.push(() => s.close());
    expect(s.constructor.name).toBe('TcpProxySocket');
  });

  it('fails to open, with the cause, when the helper cannot run', async () => {
    const f = factory({ helperPath: '/nonexistent/udp-relay-helper' });
    const lb = new FakeLoadBalancer({ [key]: [] });
    const ctx = createSocketContext({
      loadBalancer: lb,
      protocol: 'UDP',
      ip: randomLoopback(),
      servicePort,
    });
    await expect(f(ctx)).rejects.toMatchObject({
      code: 'ERR_SOCKET_OPEN',
      cause: { code: 'ERR_NATIVE_HELPER', message: /native UDP helper: cannot run/ },
    });
    expect(f.helperPid()).toBeUndefined();
  });

  it('reports a port conflict as the bind error (EADDRINUSE)', async () => {
    const lb = new FakeLoadBalancer({ [key]: [] });
    const { host, port } = await proxy(lb);
    const ctx = createSocketContext({
      loadBalancer: lb,
      protocol: 'UDP',
      ip: host,
      port,
      servicePort,
    });
    await expect(factory()(ctx)).rejects.toMatchObject({
      code: 'ERR_SOCKET_OPEN',
      cause: { code: 'EADDRINUSE' },
    });
  });
});

function endpointsOf(list: string[]): Endpoints {
  return {
    metadata: { namespace: 'ns', name: 'dns' },
    subsets: list.map((hostPort) => {
      const { host, port } = splitHostPort(hostPort) ?? { host: hostPort, port: 0 };
      return { addresses: [{ ip: host }], ports: [{ name: 'dns', port, protocol: 'UDP' }] };
    }),
  };
}
