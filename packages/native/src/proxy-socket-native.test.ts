import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import net from 'node:net';
import {
  createProxySocketFactory,
  type ProxySocket,
  servicePortNameString,
} from '@userspace-proxy/core';
import { CHANNELS } from '@userspace-proxy/core/diagnostics';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import type { TcpTestServer } from '../../core/src/test-support/echo-servers.js';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { connectTcp, readToEnd } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { type NativeTcpFactory, type NativeTcpOptions, withNativeTcp } from './index.js';
import {
  HAS_CC,
  proxyInTest,
  randomLoopback,
  startBackend,
  useCleanup,
} from './test-support/native-tests.js';

const cleanup = useCleanup();

const servicePort = { namespace: 'ns', name: 'web', port: 'http', protocol: 'TCP' as const };
const key = servicePortNameString(servicePort);

function backend(onConnection?: (socket: net.Socket) => void): Promise<TcpTestServer> {
  return startBackend(cleanup, onConnection);
}

function factory(options: NativeTcpOptions = {}): NativeTcpFactory {
  const f = withNativeTcp(createProxySocketFactory(), { threads: 2, ...options });
  cleanup.push(() => f.close());
  return f;
}

async function proxy(
  lb: FakeLoadBalancer,
  f: NativeTcpFactory = factory(),
  extra: { allowedSources?: string[] } = {},
): Promise<{ socket: ProxySocket; host: string; port: number; f: NativeTcpFactory }> {
  const ctx = createSocketContext({
    loadBalancer: lb,
    protocol: 'TCP',
    ip: randomLoopback(),
    servicePort,
    ...extra,
  });
  const socket = await f(ctx);
  proxyInTest(socket, ctx, fakeServiceInfo(), cleanup);
  return { socket, host: socket.addr().address, port: socket.addr().port, f };
}

function sha(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

/** Sends `payload`, half-closes, and reads everything back. */
async function roundTrip(host: string, port: number, payload: Buffer): Promise<Buffer> {
  const c = await connectTcp(port, host);
  const done = readToEnd(c);
  c.end(payload);
  const { data, ended } = await done;
  expect(ended).toBe('end');
  return data;
}

/** Counts the messages of a diagnostics channel until the test ends. */
function count(channel: string): { n: number } {
  const c = { n: 0 };
  const on = (): void => {
    c.n++;
  };
  subscribe(channel, on);
  cleanup.push(async () => unsubscribe(channel, on));
  return c;
}

function recordRefusals(): string[] {
  const reasons: string[] = [];
  const listener = (m: unknown) => reasons.push((m as { reason: string }).reason);
  subscribe(CHANNELS.refused, listener);
  cleanup.push(async () => unsubscribe(CHANNELS.refused, listener));
  return reasons;
}

describe.skipIf(!HAS_CC)('NativeTcpProxySocket', () => {
  it('relays small and large payloads both ways, checksummed, and counts the bytes', async () => {
    const b = await backend();
    const closes: Array<{ bytesIn: number; bytesOut: number }> = [];
    const onClose = (m: unknown) => closes.push(m as { bytesIn: number; bytesOut: number });
    subscribe(CHANNELS.connectionClose, onClose);
    cleanup.push(async () => unsubscribe(CHANNELS.connectionClose, onClose));
    const { host, port, socket } = await proxy(new FakeLoadBalancer({ [key]: [b.endpoint] }));
    expect((await roundTrip(host, port, Buffer.from('hello'))).toString()).toBe('hello');
    const big = randomBytes(5 * 1024 * 1024 + 17);
    expect(sha(await roundTrip(host, port, big))).toBe(sha(big));
    await waitFor(() => socket.activeConnections?.() === 0, 5000, 'connections closed');
    await waitFor(() => closes.length === 2, 5000, 'two connectionClose messages');
    expect(closes[1]).toMatchObject({ bytesIn: big.length, bytesOut: big.length });
  });

  it('carries many concurrent connections', async () => {
    const b = await backend();
    const { host, port } = await proxy(new FakeLoadBalancer({ [key]: [b.endpoint] }));
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => roundTrip(host, port, Buffer.from(`n${i}`.repeat(50)))),
    );
    expect(results.map(String)).toEqual(results.map((_, i) => `n${i}`.repeat(50)));
  });

  it('half-closes each way: the other direction keeps flowing', async () => {
    // The endpoint ends first after its greeting, then still reads the client.
    let got = '';
    const b = await backend((s) => {
      s.end('bye');
      s.on('data', (d) => {
        got += d.toString();
      });
    });
    const { host, port } = await proxy(new FakeLoadBalancer({ [key]: [b.endpoint] }));
    const c = await connectTcp(port, host);
    const done = readToEnd(c);
    await waitFor(async () => c.readableEnded || c.listenerCount('end') > 0, 2000);
    const { data } = await done;
    expect(data.toString()).toBe('bye');
    c.end('after-their-fin');
    await waitFor(() => got === 'after-their-fin', 5000, 'client bytes after the endpoint FIN');
    // The client ending first (the echo server answers after its FIN) is every roundTrip.
  });

  it('turns a reset on either side into a reset on the other', async () => {
    const serverSockets: net.Socket[] = [];
    const b = await backend((s) => {
      serverSockets.push(s);
      s.on('data', () => undefined);
    });
    const { host, port } = await proxy(new FakeLoadBalancer({ [key]: [b.endpoint] }));
    // endpoint resets -> client sees ECONNRESET
    const c1 = await connectTcp(port, host);
    const r1 = readToEnd(c1);
    c1.write('hi');
    await waitFor(() => serverSockets.length === 1, 5000);
    serverSockets[0]?.resetAndDestroy();
    expect((await r1).ended).toBe('ECONNRESET');
    // client resets -> endpoint sees ECONNRESET
    const c2 = await connectTcp(port, host);
    c2.write('hi');
    await waitFor(() => serverSockets.length === 2, 5000);
    const s2 = serverSockets[1] as net.Socket;
    const r2 = readToEnd(s2);
    await waitFor(() => s2.bytesRead > 0, 5000);
    c2.resetAndDestroy();
    expect((await r2).ended).toBe('ECONNRESET');
  });

  it("dials the next endpoint when one refuses, on the TCP socket's schedule", async () => {
    const b = await backend();
    const dead = await backend();
    const deadEndpoint = dead.endpoint;
    await dead.close();
    const lb = new FakeLoadBalancer({ [key]: [deadEndpoint, b.endpoint] });
    const { host, port } = await proxy(lb);
    expect((await roundTrip(host, port, Buffer.from('ok'))).toString()).toBe('ok');
    expect(lb.calls.map((c) => [c.result, c.sessionAffinityReset])).toEqual([
      [deadEndpoint, false],
      [b.endpoint, true],
    ]);
  });

  it('refuses as the TCP socket does without endpoints, over the cap, and outside the source ranges', async () => {
    const reasons = recordRefusals();
    const { host, port } = await proxy(new FakeLoadBalancer({ [key]: [] }));
    const r = await readToEnd(await connectTcp(port, host));
    expect(r.data.length).toBe(0);
    await waitFor(() => reasons.includes('no-endpoints'), 5000);

    const b = await backend((s) => s.on('data', () => undefined));
    const capped = await proxy(
      new FakeLoadBalancer({ [key]: [b.endpoint] }),
      factory({ maxConnections: 1 }),
    );
    const first = await connectTcp(capped.port, capped.host);
    await waitFor(() => b.sockets.size === 1, 5000);
    const second = await readToEnd(await connectTcp(capped.port, capped.host));
    expect(second.data.length).toBe(0);
    expect(reasons).toContain('connection-limit');
    first.destroy();

    const ranged = await proxy(new FakeLoadBalancer({ [key]: [b.endpoint] }), factory(), {
      allowedSources: ['10.0.0.0/8'],
    });
    await readToEnd(await connectTcp(ranged.port, ranged.host));
    await waitFor(() => reasons.includes('source-range'), 5000);
  });

  it("caps the helper's connections over all its sockets", async () => {
    const reasons = recordRefusals();
    const b = await backend((s) => s.on('data', () => undefined));
    const f = factory({ maxHelperConnections: 2, threads: 1 });
    const { host, port } = await proxy(new FakeLoadBalancer({ [key]: [b.endpoint] }), f);
    const held = [await connectTcp(port, host), await connectTcp(port, host)];
    await waitFor(() => b.sockets.size === 2, 5000);
    // Reset at accept: the client may see the RST before or after its connect completes.
    const third = net.connect({ host, port });
    const ended = await new Promise<string>((resolve) => {
      third.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? ''));
      third.on('close', () => resolve('close'));
    });
    expect(['ECONNRESET', 'close']).toContain(ended);
    await waitFor(() => f.counters.refusedAtCap === 1, 5000);
    expect(reasons).toContain('connection-limit');
    for (const c of held) c.destroy();
  });

  it('stops accepting on close while established connections carry on', async () => {
    const b = await backend();
    const { host, port, socket } = await proxy(new FakeLoadBalancer({ [key]: [b.endpoint] }));
    const c = await connectTcp(port, host);
    const got = readToEnd(c);
    c.write('before');
    await waitFor(() => b.sockets.size === 1, 5000);
    await socket.close();
    await expect(connectTcp(port, host)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    c.end('-after');
    expect((await got).data.toString()).toBe('before-after');
    await socket.idle?.();
  });

  it('reports a killed helper, restarts it, and serves new connections', async () => {
    const b = await backend();
    const f = factory({ restartBackoffMs: 20 });
    const { host, port } = await proxy(new FakeLoadBalancer({ [key]: [b.endpoint] }), f);
    const opens = count(CHANNELS.connectionOpen);
    const closes = count(CHANNELS.connectionClose);
    const c = await connectTcp(port, host);
    const cut = readToEnd(c);
    await waitFor(() => b.sockets.size === 1 && opens.n === 1, 5000);
    const pid = f.helperPid() as number;
    process.kill(pid, 'SIGKILL');
    expect(['ECONNRESET', 'end', 'close']).toContain((await cut).ended);
    await waitFor(() => f.counters.helperExits === 1 && f.helperPid() !== undefined, 5000);
    // The connection the helper died with is published closed (the active gauges come back).
    await waitFor(() => closes.n === 1, 5000, 'the close of the connection the helper took');
    expect(f.helperPid()).not.toBe(pid);
    await waitFor(
      async () => {
        try {
          return (await roundTrip(host, port, Buffer.from('back'))).toString() === 'back';
        } catch {
          return false;
        }
      },
      5000,
      'a connection through the restarted helper',
    );
    expect(f.counters.helperStarts).toBe(2);
  });

  it('publishes an open for every close, a connection that ends at once included', async () => {
    // The endpoint answers and closes at once: the helper's dial result and close often come in
    // one chunk, before the dial schedule's promise said the dial connected.
    const b = await backend((s) => s.end('bye'));
    const { host, port } = await proxy(new FakeLoadBalancer({ [key]: [b.endpoint] }));
    const opens = count(CHANNELS.connectionOpen);
    const closes = count(CHANNELS.connectionClose);
    await Promise.all(
      Array.from({ length: 40 }, async () => {
        const c = await connectTcp(port, host);
        await readToEnd(c);
        c.destroy();
      }),
    );
    await waitFor(() => closes.n === 40, 5000, 'every close published');
    expect(opens.n).toBe(40);
  });

  it('fails loudly for what it does not support', async () => {
    const lb = new FakeLoadBalancer({ [key]: [] });
    const ctx = createSocketContext({
      loadBalancer: lb,
      ip: randomLoopback(),
      service: {
        metadata: {
          name: 'web',
          namespace: 'ns',
          annotations: { 'userspace-proxy.io/proxy-protocol': 'v2' },
        },
        spec: { ports: [] },
      } as never,
    });
    await expect(factory()(ctx)).rejects.toMatchObject({ code: 'ERR_NATIVE_UNSUPPORTED' });
  });

  it('passes other protocols to the base factory and reports a port in use like the TCP socket', async () => {
    const f = factory();
    const udp = await f(
      createSocketContext({ loadBalancer: new FakeLoadBalancer(), protocol: 'UDP' }),
    );
    cleanup.push(() => udp.close());
    expect(udp.constructor.name).toBe('UdpProxySocket');
    const taken = net.createServer();
    const ip = randomLoopback();
    await new Promise<void>((resolve) => taken.listen(0, ip, resolve));
    cleanup.push(() => new Promise((resolve) => taken.close(resolve)));
    const p = (taken.address() as net.AddressInfo).port;
    await expect(
      f(createSocketContext({ loadBalancer: new FakeLoadBalancer(), ip, port: p })),
    ).rejects.toMatchObject({ code: 'ERR_SOCKET_OPEN', cause: { code: 'EADDRINUSE' } });
  });
});

describe.skipIf(!HAS_CC)('NativeTcpProxySocket timeouts', () => {
  it('resets a connection idle for idleTimeoutMs, and a half-closed one after halfCloseTimeoutMs', async () => {
    const b = await backend((s) => s.on('data', () => undefined));
    const lb = new FakeLoadBalancer({ [key]: [b.endpoint] });
    const idle = await proxy(lb, factory({ idleTimeoutMs: 100, halfCloseTimeoutMs: 0 }));
    const c = await connectTcp(idle.port, idle.host);
    const r = readToEnd(c);
    c.write('x');
    expect((await r).ended).toBe('ECONNRESET');
    const half = await proxy(lb, factory({ halfCloseTimeoutMs: 100 }));
    const h = await connectTcp(half.port, half.host);
    const hr = readToEnd(h);
    h.end('x'); // our FIN; the endpoint never answers
    expect((await hr).ended).toBe('ECONNRESET');
  });
});

/** A python3 listener with a backlog of 0 that never accepts (Node's always do): SYNs past its queue are dropped. */
const HAS_PYTHON = spawnSync('python3', ['-c', 'pass']).status === 0;

async function blackholed(ip: string): Promise<string> {
  const py = `import socket,sys\ns=socket.socket()\ns.bind(("${ip}",0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\nsys.stdin.read()`;
  const child = spawn('python3', ['-c', py], { stdio: ['pipe', 'pipe', 'inherit'] });
  cleanup.push(async () => child.kill('SIGKILL'));
  const port = Number(
    await new Promise<string>((resolve) => child.stdout.once('data', (d) => resolve(String(d)))),
  );
  for (let i = 0; i < 3; i++) {
    const filler = net.connect(port, ip);
    filler.on('error', () => undefined);
    cleanup.push(async () => filler.destroy());
  }
  await waitFor(
    async () => {
      const probe = net.connect(port, ip);
      probe.on('error', () => undefined);
      const connected = await Promise.race([
        new Promise<boolean>((resolve) => probe.once('connect', () => resolve(true))),
        new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 300)),
      ]);
      probe.destroy();
      return !connected;
    },
    5000,
    'the backlog full',
  );
  return `${ip}:${port}`;
}

describe.skipIf(!HAS_PYTHON || !HAS_CC)('NativeTcpProxySocket dial timeouts', () => {
  it("times a blackholed attempt out in the helper, on the schedule's first timeout, and dials the next endpoint", async () => {
    const hole = await blackholed(randomLoopback());
    const b = await backend();
    const lb = new FakeLoadBalancer({ [key]: [hole, b.endpoint] });
    const { host, port } = await proxy(lb, factory({ dialTimeoutsMs: [200, 2000] }));
    const started = performance.now();
    expect((await roundTrip(host, port, Buffer.from('through'))).toString()).toBe('through');
    // The helper's 200 ms, not Node's safety-net timer a second later.
    expect(performance.now() - started).toBeLessThan(1100);
    expect(lb.calls.map((c) => [c.result, c.sessionAffinityReset])).toEqual([
      [hole, false],
      [b.endpoint, true],
    ]);
  });
});
