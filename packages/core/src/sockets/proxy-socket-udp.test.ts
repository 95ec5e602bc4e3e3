import dgram from 'node:dgram';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  CHANNELS,
  type RefusedMessage,
  type UdpSessionCloseMessage,
  type UdpSessionMessage,
} from '../diagnostics.js';
import type { Logger } from '../logger.js';
import { noopLogger } from '../logger.js';
import { startUdpEchoServer, type UdpEchoServer } from '../test-support/echo-servers.js';
import { FakeLoadBalancer } from '../test-support/fake-load-balancer.js';
import { type FakeServiceInfo, fakeServiceInfo } from '../test-support/fake-service-info.js';
import { type UdpTestClient, udpClient } from '../test-support/net-clients.js';
import { recordChannel } from '../test-support/record-channel.js';
import { contextFor } from '../test-support/socket-context.js';
import { waitFor } from '../test-support/wait-for.js';
import {
  createLiteralLookup,
  UdpProxySocket,
  type UdpProxySocketOptions,
} from './proxy-socket-udp.js';

const svc = { namespace: 'ns', name: 'dns', port: 'dns' };
const KEY = 'ns/dns:dns';
const HOST = '127.1.5.1';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

function record<T>(channel: string): T[] {
  return recordChannel<T>(channel, (fn) => cleanup.push(fn));
}

async function echoServer(prefix?: string): Promise<UdpEchoServer> {
  const server = await startUdpEchoServer(
    prefix === undefined ? { host: '127.1.5.2' } : { host: '127.1.5.2', prefix },
  );
  cleanup.push(() => server.close());
  return server;
}

async function proxy(
  endpoints: string[],
  opts: UdpProxySocketOptions & { logger?: Logger; allowedSources?: string[] } = {},
  infoOverrides: { udpIdleTimeoutMs?: number } = {},
): Promise<{
  socket: UdpProxySocket;
  lb: FakeLoadBalancer;
  info: FakeServiceInfo;
  loop: Promise<void>;
}> {
  const lb = new FakeLoadBalancer({ [KEY]: endpoints });
  const { logger, allowedSources, ...socketOpts } = opts;
  const context = contextFor('UDP', HOST, 0, {
    lb,
    servicePort: svc,
    ...(logger ? { logger } : {}),
    ...(allowedSources ? { allowedSources } : {}),
  });
  const socket = await UdpProxySocket.open(context, socketOpts);
  cleanup.push(() => socket.close());
  const info = fakeServiceInfo({ protocol: 'UDP', ...infoOverrides });
  const loop = socket.proxyLoop(info);
  return { socket, lb, info, loop };
}

async function client(): Promise<UdpTestClient> {
  const c = await udpClient();
  cleanup.push(() => c.close());
  return c;
}

describe('UdpProxySocket', () => {
  it('relays a datagram and sends the reply from the Service socket', async () => {
    const opened = record<UdpSessionMessage>(CHANNELS.udpSessionOpen);
    const echo = await echoServer();
    const { socket, info } = await proxy([echo.endpoint]);
    const c = await client();
    c.send('query', socket.addr().port, HOST);
    const reply = await c.next();
    expect(reply.data.toString()).toBe('query');
    expect(reply.from).toMatchObject({ address: HOST, port: socket.addr().port });
    const key = `127.0.0.1:${c.port}`;
    expect([...info.activeClients.keys()]).toEqual([key]);
    expect(opened).toEqual([
      { service: KEY, protocol: 'UDP', client: key, endpoint: echo.endpoint },
    ]);
    expect(socket.sessionCount).toBe(1);
  });

  it('relays 65 507-byte datagrams intact both ways', async () => {
    const echo = await echoServer();
    const { socket } = await proxy([echo.endpoint]);
    const c = await client();
    const big = Buffer.alloc(65_507);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7) & 0xff;
    c.send(big, socket.addr().port, HOST);
    const reply = await c.next();
    expect(reply.data.length).toBe(65_507);
    expect(reply.data.equals(big)).toBe(true);
    expect(echo.received[0]?.size).toBe(65_507);
  });

  it('relays an empty datagram and survives odd input', async () => {
    const echo = await echoServer();
    const { socket } = await proxy([echo.endpoint]);
    const c = await client();
    c.send(Buffer.alloc(0), socket.addr().port, HOST);
    expect((await c.next()).data.length).toBe(0);
    c.send('still serving', socket.addr().port, HOST);
    expect((await c.next()).data.toString()).toBe('still serving');
  });

  it('gives each client "ip:port" its own session and upstream socket', async () => {
    const echo = await echoServer();
    const { socket, info } = await proxy([echo.endpoint]);
    const a = await client();
    const b = await client();
    for (const c of [a, b, a]) c.send(`from ${c.port}`, socket.addr().port, HOST);
    expect((await a.next()).data.toString()).toBe(`from ${a.port}`);
    expect((await b.next()).data.toString()).toBe(`from ${b.port}`);
    expect((await a.next()).data.toString()).toBe(`from ${a.port}`);
    expect(info.activeClients.size).toBe(2);
    const sources = new Set(echo.received.map((r) => r.from));
    expect(sources.size).toBe(2);
  });

  it('queues datagrams that arrive while the upstream socket is still binding', async () => {
    const echo = await echoServer();
    const { socket } = await proxy([echo.endpoint]);
    const c = await client();
    for (let i = 0; i < 20; i++) c.send(`n${i}`, socket.addr().port, HOST);
    const replies = new Set<string>();
    for (let i = 0; i < 20; i++) replies.add((await c.next()).data.toString());
    expect(replies.size).toBe(20);
  });

  it('ends a session after udpIdleTimeoutMs without traffic either way, and traffic keeps it', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'performance'] });
    const closed = record<UdpSessionCloseMessage>(CHANNELS.udpSessionClose);
    const echo = await echoServer();
    const { socket, info } = await proxy([echo.endpoint], {}, { udpIdleTimeoutMs: 800 });
    const c = await client();
    c.send('one', socket.addr().port, HOST);
    await c.next();
    vi.advanceTimersByTime(600);
    c.send('two', socket.addr().port, HOST);
    await c.next();
    vi.advanceTimersByTime(600);
    expect(info.activeClients.size).toBe(1);
    vi.advanceTimersByTime(300);
    expect(info.activeClients.size).toBe(0);
    expect(closed).toEqual([
      {
        service: KEY,
        protocol: 'UDP',
        client: `127.0.0.1:${c.port}`,
        endpoint: echo.endpoint,
        datagramsIn: 2,
        datagramsOut: 2,
        bytesIn: 6,
        bytesOut: 6,
      },
    ]);
    c.send('three', socket.addr().port, HOST);
    expect((await c.next()).data.toString()).toBe('three');
    expect(info.activeClients.size).toBe(1);
  });

  it('drops datagrams of new clients past maxUdpSessions, logging once per interval', async () => {
    const refused = record<RefusedMessage>(CHANNELS.refused);
    const warn = vi.fn();
    const logger = { ...noopLogger, warn, getSubLogger: () => ({ ...noopLogger, warn }) };
    const echo = await echoServer();
    const { socket, info } = await proxy([echo.endpoint], {
      maxUdpSessions: 2,
      maxUdpSessionsPerSource: 2,
      logger,
    });
    const [a, b, c] = [await client(), await client(), await client()];
    for (const x of [a, b]) {
      x.send('hi', socket.addr().port, HOST);
      await x.next();
    }
    c.send('one', socket.addr().port, HOST);
    c.send('two', socket.addr().port, HOST);
    await waitFor(() => refused.length === 2, 5_000, 'two refusals');
    expect(refused[0]).toEqual({ service: KEY, protocol: 'UDP', reason: 'udp-session-limit' });
    expect(warn).toHaveBeenCalledTimes(1);
    expect(info.activeClients.size).toBe(2);
    a.send('still works', socket.addr().port, HOST);
    expect((await a.next()).data.toString()).toBe('still works');
    await expect(c.next(200)).rejects.toThrow('no datagram');
  });

  it('gives one source address at most its share of the sessions (a quarter by default)', async () => {
    const refused = record<RefusedMessage>(CHANNELS.refused);
    const echo = await echoServer();
    // 8 sessions: one source IP gets at most 2, so it cannot lock other clients out.
    const { socket, info } = await proxy([echo.endpoint], { maxUdpSessions: 8 });
    const port = socket.addr().port;
    const [a, b, c] = [await client(), await client(), await client()];
    for (const x of [a, b]) {
      x.send('hi', port, HOST);
      await x.next();
    }
    c.send('locked out', port, HOST);
    await waitFor(() => refused.length === 1, 5_000, 'a refusal');
    expect(refused[0]).toEqual({ service: KEY, protocol: 'UDP', reason: 'udp-session-limit' });
    const other = await udpClient('127.1.5.9');
    cleanup.push(() => other.close());
    other.send('another source', port, HOST);
    expect((await other.next()).data.toString()).toBe('another source');
    expect(info.activeClients.size).toBe(3);
  });

  it('drops datagrams from outside allowedSources (loadBalancerSourceRanges), counted', async () => {
    const refused = record<RefusedMessage>(CHANNELS.refused);
    const echo = await echoServer();
    const { socket, info } = await proxy([echo.endpoint], { allowedSources: ['127.1.5.9/32'] });
    const port = socket.addr().port;
    const outsider = await client();
    outsider.send('let me in', port, HOST);
    await waitFor(() => refused.length === 1, 5_000, 'a refusal');
    expect(refused[0]).toEqual({ service: KEY, protocol: 'UDP', reason: 'source-range' });
    const allowed = await udpClient('127.1.5.9');
    cleanup.push(() => allowed.close());
    allowed.send('hello', port, HOST);
    expect((await allowed.next()).data.toString()).toBe('hello');
    expect(info.activeClients.size).toBe(1);
  });

  it('ends every session on abortConnections', async () => {
    const echo = await echoServer();
    const { socket, info } = await proxy([echo.endpoint]);
    const c = await client();
    c.send('hi', socket.addr().port, HOST);
    await c.next();
    expect(socket.sessionCount).toBe(1);
    socket.abortConnections();
    expect(socket.sessionCount).toBe(0);
    expect(info.activeClients.size).toBe(0);
  });

  it('drops datagrams while the Service has no endpoints', async () => {
    const refused = record<RefusedMessage>(CHANNELS.refused);
    const { socket, info } = await proxy([]);
    const c = await client();
    c.send('anyone?', socket.addr().port, HOST);
    await waitFor(() => refused.length === 1, 5_000, 'refusal');
    expect(refused[0]).toEqual({ service: KEY, protocol: 'UDP', reason: 'no-endpoints' });
    expect(info.activeClients.size).toBe(0);
  });

  it('close() ends every session at once and resolves proxyLoop', async () => {
    const closed = record<UdpSessionCloseMessage>(CHANNELS.udpSessionClose);
    const echo = await echoServer();
    const { socket, info, loop } = await proxy([echo.endpoint]);
    const [a, b] = [await client(), await client()];
    for (const x of [a, b]) {
      x.send('hi', socket.addr().port, HOST);
      await x.next();
    }
    await socket.close();
    await loop;
    expect(info.activeClients.size).toBe(0);
    expect(socket.sessionCount).toBe(0);
    expect(closed).toHaveLength(2);
    a.send('late', socket.addr().port, HOST);
    await expect(a.next(200)).rejects.toThrow('no datagram');
    expect(echo.received).toHaveLength(2);
  });

  it('ends a session whose endpoint went away and re-picks without affinity', async () => {
    const gone = await startUdpEchoServer({ host: '127.1.5.3' });
    await gone.close();
    const echo = await echoServer();
    const { socket, lb, info } = await proxy([gone.endpoint, echo.endpoint]);
    const c = await client();
    c.send('first', socket.addr().port, HOST);
    // ICMP port unreachable comes back as ECONNREFUSED on the connected upstream socket.
    await waitFor(() => info.activeClients.size === 0 && lb.calls.length === 1, 5_000, 'ended');
    c.send('second', socket.addr().port, HOST);
    expect((await c.next()).data.toString()).toBe('second');
    expect(lb.calls.map((call) => [call.result, call.sessionAffinityReset])).toEqual([
      [gone.endpoint, false],
      [echo.endpoint, true],
    ]);
  });

  it('refuses a client whose upstream socket cannot be opened (EMFILE) and keeps serving', async () => {
    const refused = record<RefusedMessage>(CHANNELS.refused);
    const dialErrors = record<{ error: NodeJS.ErrnoException }>(CHANNELS.dialError);
    const echo = await echoServer();
    let fail = true;
    const createSocket = (options: dgram.SocketOptions): dgram.Socket => {
      const socket = dgram.createSocket(options);
      // Only session sockets connect; the Service socket is made by the same function.
      if (fail) {
        socket.connect = (() => {
          const error = Object.assign(new Error('bind EMFILE'), { code: 'EMFILE' });
          process.nextTick(() => socket.emit('error', error));
        }) as dgram.Socket['connect'];
      }
      return socket;
    };
    const { socket, info } = await proxy([echo.endpoint], { createSocket });
    const c = await client();
    c.send('first', socket.addr().port, HOST);
    await waitFor(() => refused.length === 1, 5_000, 'refusal');
    expect(refused[0]?.reason).toBe('dial-failed');
    expect(dialErrors[0]?.error.code).toBe('EMFILE');
    expect(info.activeClients.size).toBe(0);
    fail = false;
    c.send('second', socket.addr().port, HOST);
    expect((await c.next()).data.toString()).toBe('second');
  });

  it('stops once the ServiceInfo is no longer alive', async () => {
    const echo = await echoServer();
    const { socket, info, loop } = await proxy([echo.endpoint]);
    info.alive = false;
    const c = await client();
    c.send('hello', socket.addr().port, HOST);
    await loop;
    expect(echo.received).toHaveLength(0);
  });
});

describe('createLiteralLookup', () => {
  type Answer = [error: NodeJS.ErrnoException | null, address: string, family: number];
  const ask = (lookup: ReturnType<typeof createLiteralLookup>, host: string) =>
    new Promise<{ answer: Answer; sync: boolean }>((resolve) => {
      let sync = true;
      (lookup as (h: string, o: object, cb: (...a: Answer) => void) => void)(
        host,
        {},
        (...answer) => resolve({ answer, sync }),
      );
      sync = false;
    });

  it('answers IP literals at once, the same one again from its cache, and a new one afresh', async () => {
    const lookup = createLiteralLookup();
    expect(await ask(lookup, '127.1.5.9')).toEqual({ answer: [null, '127.1.5.9', 4], sync: true });
    expect(await ask(lookup, '127.1.5.9')).toEqual({ answer: [null, '127.1.5.9', 4], sync: true });
    expect(await ask(lookup, '::ffff:127.1.5.9')).toEqual({
      answer: [null, '::ffff:127.1.5.9', 6],
      sync: true,
    });
    expect(await ask(lookup, '127.1.5.10')).toEqual({
      answer: [null, '127.1.5.10', 4],
      sync: true,
    });
  });

  it('hands a name to dns.lookup, which answers later, and does not cache it', async () => {
    const lookup = createLiteralLookup();
    const first = await ask(lookup, 'localhost');
    expect(first.sync).toBe(false);
    expect(first.answer[0]).toBeNull();
    expect([4, 6]).toContain(first.answer[2]);
    expect((await ask(lookup, 'localhost')).sync).toBe(false);
  });
});
