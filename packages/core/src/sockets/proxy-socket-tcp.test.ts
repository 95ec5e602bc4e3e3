import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { CHANNELS, type ConnectionCloseMessage, type RefusedMessage } from '../diagnostics.js';
import { startTcpServer, type TcpTestServer } from '../test-support/echo-servers.js';
import { FakeLoadBalancer } from '../test-support/fake-load-balancer.js';
import { type FakeServiceInfo, fakeServiceInfo } from '../test-support/fake-service-info.js';
import { connectTcp, readBytes, readToEnd } from '../test-support/net-clients.js';
import { recordChannel } from '../test-support/record-channel.js';
import { delayConnect } from '../test-support/slow-dial.js';
import { contextFor } from '../test-support/socket-context.js';
import { waitFor } from '../test-support/wait-for.js';
import { TcpProxySocket, type TcpProxySocketOptions } from './proxy-socket-tcp.js';
import type { TcpConnection } from './tcp-connection.js';
import { RELAY_LARGE_BUFFER_BYTES } from './tcp-relay.js';

const svc = { namespace: 'ns', name: 'web', port: 'http' };
const KEY = 'ns/web:http';
const HOST = '127.1.4.1';

/** Everything one test opened, closed after it. */
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

function record<T>(channel: string): T[] {
  return recordChannel<T>(channel, (fn) => cleanup.push(fn));
}

async function server(onConnection?: (socket: net.Socket) => void): Promise<TcpTestServer> {
  const s = await startTcpServer(
    onConnection ? { host: '127.1.4.2', onConnection } : { host: '127.1.4.2' },
  );
  cleanup.push(() => s.close());
  return s;
}

async function proxy(
  endpoints: string[],
  opts: TcpProxySocketOptions = {},
  serve = true,
): Promise<{
  socket: TcpProxySocket;
  lb: FakeLoadBalancer;
  info: FakeServiceInfo;
  loop?: Promise<void>;
}> {
  const lb = new FakeLoadBalancer({ [KEY]: endpoints });
  const socket = await TcpProxySocket.open(
    contextFor('TCP', HOST, 0, { lb, servicePort: svc }),
    opts,
  );
  cleanup.push(() => socket.close());
  const info = fakeServiceInfo();
  const loop = serve ? socket.proxyLoop(info) : undefined;
  return loop ? { socket, lb, info, loop } : { socket, lb, info };
}

/**
 * A proxy whose dial attempts connect `ms` late, and how many bytes its first client's socket had
 * read when the attempt connected (-1 before).
 */
async function proxyWithSlowDial(
  endpoint: string,
  ms: number,
): Promise<{ socket: TcpProxySocket; readWhenConnected: () => number }> {
  const accepted: TcpConnection[] = [];
  let read = -1;
  const { socket } = await proxy([endpoint], {
    acceptPolicy: () => ({
      accept: (conn) => {
        accepted.push(conn as TcpConnection);
        return 'proxy';
      },
    }),
    connect: (options) =>
      delayConnect(net.connect(options), ms, () => {
        read = accepted[0]?.client.bytesRead ?? -1;
      }),
  });
  return { socket, readWhenConnected: () => read };
}

async function client(socket: TcpProxySocket): Promise<net.Socket> {
  const c = await connectTcp(socket.addr().port, HOST);
  c.on('error', () => {});
  cleanup.push(() => c.destroy());
  return c;
}

/** Whether iproute2's `ss` is here to show a socket's keep-alive timer. */
function hasSs(): boolean {
  try {
    execFileSync('ss', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe('TcpProxySocket', () => {
  it('keeps little per idle listener: shared options and event handlers, state made on demand', async () => {
    const servers: net.Server[] = [];
    const opts: TcpProxySocketOptions = {
      createServer: (o) => {
        const s = net.createServer(o);
        servers.push(s);
        return s;
      },
    };
    const one = await proxy([], opts, false);
    const two = await proxy([], opts, false);
    const [a, b] = servers as [net.Server, net.Server];
    // One function per event for every listener, not a closure per listener.
    for (const event of ['connection', 'error', 'listening'])
      expect(a.listeners(event)).toEqual(b.listeners(event));
    // Options resolved once per options object, and frozen because they are shared.
    expect(one.socket.relayOptions.halfCloseTimeoutMs).toBe(60_000);
    expect(one.socket.dialOptions.timeoutsMs).toBe(two.socket.dialOptions.timeoutsMs);
    expect(Object.isFrozen(one.socket.dialOptions.timeoutsMs)).toBe(true);
    expect(one.socket.dialOptions.name).toBe(KEY);
    // Made once, then kept.
    expect(one.socket.relayOptions).toBe(one.socket.relayOptions);
    expect(one.socket.connectEndpoint).toBe(one.socket.connectEndpoint);
  });

  it('relays both ways and reports the connection with its byte counts', async () => {
    const opened = record<unknown>(CHANNELS.connectionOpen);
    const closed = record<ConnectionCloseMessage>(CHANNELS.connectionClose);
    const echo = await server();
    const { socket } = await proxy([echo.endpoint]);
    const c = await client(socket);
    const local = `${c.localAddress}:${c.localPort}`;
    const result = readToEnd(c);
    c.end('hello');
    expect(await result).toEqual({ data: Buffer.from('hello'), ended: 'end' });
    await waitFor(() => closed.length === 1, 5_000, 'connectionClose');
    expect(opened[0]).toMatchObject({
      service: KEY,
      protocol: 'TCP',
      client: local,
      endpoint: echo.endpoint,
    });
    expect(closed[0]).toMatchObject({
      service: KEY,
      endpoint: echo.endpoint,
      bytesIn: 5,
      bytesOut: 5,
    });
    expect(closed[0]?.durationMs).toBeGreaterThanOrEqual(0);
    await waitFor(() => socket.activeConnections() === 0, 5_000, 'connection count back to 0');
  });

  it('carries large transfers intact in both directions at once', async () => {
    const echo = await server();
    const { socket } = await proxy([echo.endpoint]);
    const c = await client(socket);
    const payload = randomBytes(8 * 1024 * 1024 + 123);
    const result = readToEnd(c);
    c.end(payload);
    const { data, ended } = await result;
    expect(ended).toBe('end');
    expect(data.length).toBe(payload.length);
    expect(data.equals(payload)).toBe(true);
  });

  it('serves many concurrent clients, each getting its own bytes back', async () => {
    const echo = await server();
    const { socket } = await proxy([echo.endpoint]);
    const results = await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        const c = await client(socket);
        const result = readToEnd(c);
        c.end(`client-${i}-`.repeat(100));
        return (await result).data.toString();
      }),
    );
    results.forEach((data, i) => {
      expect(data).toBe(`client-${i}-`.repeat(100));
    });
    expect(echo.accepted).toBe(50);
  });

  it('does not let a blackholed endpoint delay other clients', async () => {
    const echo = await server();
    const blackholed: net.Socket[] = [];
    const connect = (options: net.TcpNetConnectOpts): net.Socket => {
      if (options.host === '127.1.9.9') {
        const never = new net.Socket();
        blackholed.push(never);
        return never;
      }
      return net.connect(options);
    };
    // The first client is sent into the black hole for a minute; the second must not wait for it.
    const { socket } = await proxy(['127.1.9.9:80', echo.endpoint], {
      connect,
      dialTimeoutsMs: [60_000],
    });
    const stuck = await client(socket);
    await waitFor(() => blackholed.length === 1, 5_000, 'first dial started');
    const c = await client(socket);
    const result = readToEnd(c);
    c.end('not blocked');
    expect((await result).data.toString()).toBe('not blocked');
    expect(stuck.destroyed).toBe(false);
    expect(socket.activeConnections()).toBe(1);
  });

  it('closes a client at once when the Service has no endpoints', async () => {
    const refused = record<RefusedMessage>(CHANNELS.refused);
    const { socket } = await proxy([]);
    const c = await client(socket);
    const { data, ended } = await readToEnd(c);
    expect(data.length).toBe(0);
    expect(ended).toBe('end');
    expect(refused).toEqual([{ service: KEY, protocol: 'TCP', reason: 'no-endpoints' }]);
    expect(socket.activeConnections()).toBe(0);
  });

  it('retries on the next endpoint with affinity reset, and closes the client when all fail', async () => {
    const refused = record<RefusedMessage>(CHANNELS.refused);
    const echo = await server();
    const dead = await startTcpServer({ host: '127.1.4.3' });
    await dead.close();
    const { socket, lb } = await proxy([dead.endpoint, echo.endpoint], {
      dialTimeoutsMs: [1000, 1000],
    });
    const c = await client(socket);
    const result = readToEnd(c);
    c.end('second time lucky');
    expect((await result).data.toString()).toBe('second time lucky');
    expect(lb.calls.map((call) => [call.result, call.sessionAffinityReset])).toEqual([
      [dead.endpoint, false],
      [echo.endpoint, true],
    ]);

    lb.setEndpoints(KEY, [dead.endpoint]);
    const doomed = await client(socket);
    expect((await readToEnd(doomed)).data.length).toBe(0);
    expect(refused).toEqual([{ service: KEY, protocol: 'TCP', reason: 'dial-failed' }]);
  });

  it('carries a client half-close: the client still receives what the backend sends after', async () => {
    const backend = await server((s) => {
      const got: Buffer[] = [];
      s.on('data', (d: Buffer) => got.push(d));
      s.on('end', () => {
        s.write(`got ${Buffer.concat(got).toString()}; `);
        setImmediate(() => s.end('and more after your FIN'));
      });
    });
    const { socket } = await proxy([backend.endpoint]);
    const c = await client(socket);
    const result = readToEnd(c);
    c.end('request');
    expect(await result).toEqual({
      data: Buffer.from('got request; and more after your FIN'),
      ended: 'end',
    });
  });

  it('carries a backend half-close: the client can still send after the backend ended', async () => {
    let received: Promise<{ data: Buffer; ended: string }> | undefined;
    const backend = await server((s) => {
      received = readToEnd(s);
      s.end('greeting then FIN');
    });
    const { socket } = await proxy([backend.endpoint]);
    const c = await client(socket);
    const fromBackend = await readToEnd(c);
    expect(fromBackend).toEqual({ data: Buffer.from('greeting then FIN'), ended: 'end' });
    c.end('late upload');
    await waitFor(() => received, 5_000, 'backend connection');
    expect(await received).toEqual({ data: Buffer.from('late upload'), ended: 'end' });
  });

  it('resets both sides when a half-closed connection stays silent past halfCloseTimeoutMs', async () => {
    const backendSockets: net.Socket[] = [];
    const backend = await server((s) => {
      backendSockets.push(s);
      s.end('bye'); // FIN, then never reads nor closes: would linger in FIN_WAIT2/CLOSE_WAIT.
    });
    const { socket } = await proxy([backend.endpoint], { halfCloseTimeoutMs: 150 });
    const c = await client(socket);
    const { data, ended } = await readToEnd(c);
    expect([data.toString(), ended]).toEqual(['bye', 'end']);
    // The client never ends its side either; the proxy must clean up on its own.
    await waitFor(() => socket.activeConnections() === 0, 5_000, 'connection released');
    await waitFor(() => backendSockets[0]?.destroyed, 5_000, 'backend reset');
    // The client's read side is already done, so it only learns of the reset when it writes.
    const failed = new Promise((resolve) => c.once('error', resolve));
    c.write('anyone there?');
    expect(['ECONNRESET', 'EPIPE']).toContain(((await failed) as NodeJS.ErrnoException).code);
  });

  it('resets the client when the backend resets, and the backend when the client resets', async () => {
    const backendSockets: net.Socket[] = [];
    const backend = await server((s) => {
      backendSockets.push(s);
      s.once('data', (d: Buffer) => {
        if (d.toString() === 'reset me') s.resetAndDestroy();
      });
    });
    const { socket } = await proxy([backend.endpoint]);
    const c = await client(socket);
    const result = readToEnd(c);
    c.write('reset me');
    expect((await result).ended).toBe('ECONNRESET');

    const c2 = await client(socket);
    c2.write('hello');
    await waitFor(() => backendSockets.length === 2, 5_000, 'second backend connection');
    const backendEnd = readToEnd(backendSockets[1] as net.Socket);
    c2.resetAndDestroy();
    const { ended } = await backendEnd;
    expect(['ECONNRESET', 'end', 'close']).toContain(ended);
    await waitFor(() => backendSockets[1]?.destroyed, 5_000, 'backend leg torn down');
    await waitFor(() => socket.activeConnections() === 0, 5_000, 'connections released');
  });

  it('closes connections idle in both directions after idleTimeoutMs', async () => {
    const backendSockets: net.Socket[] = [];
    const backend = await server((s) => {
      backendSockets.push(s);
      s.pipe(s);
    });
    const { socket } = await proxy([backend.endpoint], { idleTimeoutMs: 150 });
    const c = await client(socket);
    c.write('ping');
    expect((await readBytes(c, 4)).toString()).toBe('ping');
    const { ended } = await readToEnd(c);
    expect(ended).toBe('end');
    await waitFor(() => backendSockets[0]?.destroyed, 5_000, 'backend leg closed');
  });

  it('refuses connections past maxConnections and accepts again once one ends', async () => {
    const refused = record<RefusedMessage>(CHANNELS.refused);
    const echo = await server();
    const { socket } = await proxy([echo.endpoint], { maxConnections: 2 });
    const a = await client(socket);
    const b = await client(socket);
    for (const c of [a, b]) {
      c.write('x');
      await readBytes(c, 1);
    }
    const third = await client(socket);
    expect((await readToEnd(third)).data.length).toBe(0);
    expect(refused).toEqual([{ service: KEY, protocol: 'TCP', reason: 'connection-limit' }]);
    a.end();
    await waitFor(() => socket.activeConnections() === 1, 5_000, 'a slot freed');
    const fourth = await client(socket);
    fourth.write('y');
    expect((await readBytes(fourth, 1)).toString()).toBe('y');
  });

  it('close() stops accepting while established connections carry on', async () => {
    const echo = await server();
    const { socket, loop } = await proxy([echo.endpoint]);
    const c = await client(socket);
    c.write('before');
    expect((await readBytes(c, 6)).toString()).toBe('before');
    await socket.close();
    await loop;
    await expect(connectTcp(socket.addr().port, HOST)).rejects.toMatchObject({
      code: 'ECONNREFUSED',
    });
    c.write('after');
    expect((await readBytes(c, 5)).toString()).toBe('after');
    await socket.close();
  });

  it('holds connections accepted before proxyLoop and serves them once it starts', async () => {
    const echo = await server();
    const { socket, info } = await proxy([echo.endpoint], {}, false);
    const c = await client(socket);
    c.write('early');
    await waitFor(() => socket.activeConnections() === 0, 1_000, 'held, not served');
    const loop = socket.proxyLoop(info);
    expect((await readBytes(c, 5)).toString()).toBe('early');
    await socket.close();
    await loop;
  });

  it('stops serving once the ServiceInfo is no longer alive', async () => {
    const echo = await server();
    const { socket, info, loop } = await proxy([echo.endpoint]);
    info.alive = false;
    const c = await client(socket).catch(() => undefined);
    if (c !== undefined) expect((await readToEnd(c)).data.length).toBe(0);
    await loop;
    expect(echo.accepted).toBe(0);
  });

  it('pauses accepting after an accept error and listens again after the back-off', async () => {
    const acceptErrors = record<{ error: Error }>(CHANNELS.acceptError);
    const echo = await server();
    let server0: net.Server | undefined;
    const { socket } = await proxy([echo.endpoint], {
      acceptBackoffMs: 50,
      createServer: (options) => {
        server0 = net.createServer(options);
        return server0;
      },
    });
    const failure = Object.assign(new Error('accept EMFILE'), {
      code: 'EMFILE',
      syscall: 'accept',
    });
    server0?.emit('error', failure);
    expect(acceptErrors).toHaveLength(1);
    expect(acceptErrors[0]?.error).toBe(failure);
    expect(server0?.listening).toBe(false);
    await waitFor(() => server0?.listening, 5_000, 'listening again');
    const c = await client(socket);
    c.write('recovered');
    expect((await readBytes(c, 9)).toString()).toBe('recovered');
    expect(socket.addr().port).toBe((server0?.address() as net.AddressInfo | null)?.port);
  });

  it.runIf(process.platform === 'linux' && hasSs())(
    'keeps keep-alive on accepted connections, set once on the listener (or off at 0)',
    async () => {
      const backend = await server();
      for (const keepAliveMs of [15_000, 0]) {
        const { socket } = await proxy([backend.endpoint], { keepAliveMs });
        const c = await client(socket);
        c.write('ping');
        await readBytes(c, 4);
        const port = socket.addr().port;
        const out = execFileSync('ss', ['-tnoH', 'state', 'established', `( sport = :${port} )`], {
          encoding: 'utf8',
        });
        expect(out, `keepAliveMs ${keepAliveMs}`).toContain(`${HOST}:${port}`);
        if (keepAliveMs > 0) expect(out).toMatch(/timer:\(keepalive,1[0-5]sec/);
        else expect(out).not.toContain('keepalive');
        // The dialled leg: keep-alive is set on it once the relay has started.
        const leg = execFileSync(
          'ss',
          ['-tnoH', 'state', 'established', `( dport = :${backend.port} )`],
          { encoding: 'utf8' },
        );
        expect(leg, `keepAliveMs ${keepAliveMs}`).toContain(`:${backend.port}`);
        if (keepAliveMs > 0) expect(leg).toMatch(/timer:\(keepalive,1[0-5]sec/);
        else expect(leg).not.toContain('keepalive');
        c.destroy();
        await waitFor(() => backend.sockets.size === 0, 5_000, 'the relay closed');
      }
    },
  );

  it('reads the request while the dial is in flight, writes it first once connected, and carries a FIN that came meanwhile', async () => {
    const backend = await server((s) => {
      let got = '';
      s.on('data', (d: Buffer) => {
        got += d.toString();
      });
      s.on('end', () => s.end(`got:${got}`));
    });
    const slow = await proxyWithSlowDial(backend.endpoint, 150);
    const c = await client(slow.socket);
    c.end('hello');
    const answer = await readToEnd(c);
    expect(answer.data.toString()).toBe('got:hello');
    expect(answer.ended).toBe('end');
    // The request and its FIN were read before the endpoint connected.
    expect(slow.readWhenConnected()).toBe(5);
  });

  it('reads at most 8 KiB of a client while its dial is in flight, then every byte once relaying', async () => {
    let received = 0;
    const backend = await server((s) => {
      s.on('data', (d: Buffer) => {
        received += d.length;
      });
    });
    const slow = await proxyWithSlowDial(backend.endpoint, 300);
    const c = await client(slow.socket);
    const total = 1024 * 1024;
    c.write(Buffer.alloc(total, 7));
    await waitFor(() => received === total, 10_000, 'every byte at the backend');
    expect(slow.readWhenConnected()).toBeGreaterThan(0);
    expect(slow.readWhenConnected()).toBeLessThan(2 * 4096);
  });

  it('applies back-pressure: a backend that does not read stalls the client, nothing piles up in the proxy', async () => {
    const backendSockets: net.Socket[] = [];
    const backend = await server((s) => {
      backendSockets.push(s);
      s.pause(); // a backend that does not read
    });
    // The proxy's own leg to the backend, to read what the proxy itself has queued.
    const legs: net.Socket[] = [];
    const { socket } = await proxy([backend.endpoint], {
      connect: (options) => {
        const leg = net.connect(options);
        legs.push(leg);
        return leg;
      },
    });
    const c = await client(socket);
    const chunk = Buffer.alloc(1024 * 1024, 1);
    let written = 0;
    // Write until the proxy stops reading and the kernel buffers fill up: with unbounded buffering
    // in the proxy this would never stop.
    for (;;) {
      written += chunk.length;
      if (!c.write(chunk)) {
        await Promise.race([
          new Promise((resolve) => c.once('drain', resolve)),
          new Promise((resolve) => setTimeout(resolve, 300)),
        ]);
        if (c.writableLength > 0) break;
      }
      expect(written).toBeLessThan(256 * 1024 * 1024);
    }
    // What the design allows: one relay buffer per direction queued in the proxy, and the four
    // kernel socket buffers on the path (client send, proxy receive, proxy send, backend receive).
    const queuedInProxy = legs[0]?.writableLength ?? Number.POSITIVE_INFINITY;
    expect(queuedInProxy).toBeLessThanOrEqual(RELAY_LARGE_BUFFER_BYTES);
    const kernel = 2 * maxBuffer('tcp_wmem') + 2 * maxBuffer('tcp_rmem');
    expect(written - c.writableLength).toBeLessThanOrEqual(
      kernel + RELAY_LARGE_BUFFER_BYTES + chunk.length,
    );
    backendSockets[0]?.resume();
    await waitFor(() => c.writableLength === 0, 10_000, 'flow resumes');
  });
});

/** The kernel's largest TCP buffer of one kind (`tcp_wmem` or `tcp_rmem`), bytes; 32 MiB if unknown. */
function maxBuffer(kind: 'tcp_wmem' | 'tcp_rmem'): number {
  try {
    const fields = readFileSync(`/proc/sys/net/ipv4/${kind}`, 'utf8').trim().split(/\s+/);
    const max = Number(fields[2]);
    return Number.isFinite(max) && max > 0 ? max : 32 * 1024 * 1024;
  } catch {
    return 32 * 1024 * 1024;
  }
}
