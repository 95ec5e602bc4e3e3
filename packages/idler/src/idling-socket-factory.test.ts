import dgram from 'node:dgram';
import net from 'node:net';
import {
  createProxySocketFactory,
  InvalidOptionError,
  type ProxySocket,
  RoundRobinLoadBalancer,
  UnsupportedProtocolError,
} from '@userspace-proxy/core';
import {
  createServiceInfo,
  createSocketContext,
  type StandaloneSocketContext,
} from '@userspace-proxy/core/sockets';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Idler } from './idler.js';
import { createIdlingProxySocketFactory } from './idling-socket-factory.js';
import {
  closed,
  connect,
  endpointsOf,
  firstBytes,
  RecordingRecorder,
  randomLoopback,
  tcpBackend,
  udpBackend,
} from './test-support/fakes.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

async function open(
  protocol: 'TCP' | 'UDP',
  idler: Idler,
  extra: Parameters<typeof createIdlingProxySocketFactory>[0] extends infer O
    ? Partial<O>
    : never = {},
) {
  const lb = new RoundRobinLoadBalancer();
  const ip = randomLoopback();
  const servicePort = { namespace: 'ns', name: 'web', port: 'p', protocol };
  const context: StandaloneSocketContext = createSocketContext({
    loadBalancer: lb,
    protocol,
    ip,
    servicePort,
  });
  const factory = createIdlingProxySocketFactory({ idler, dialTimeoutsMs: [500], ...extra });
  const socket: ProxySocket = await factory(context);
  void socket.proxyLoop(createServiceInfo(context));
  cleanups.push(() => socket.close());
  const publish = (host: string, port: number) => {
    lb.onEndpointsAdd(endpointsOf('ns', 'web', [host], port, 'p', protocol));
    context.notifyEndpointsChanged();
  };
  return { lb, ip, context, socket, port: socket.addr().port, publish };
}

describe('the idling TCP socket on loopback', () => {
  it('refuses a bad socket option at once, with or without the tcp option', () => {
    const idler = new Idler();
    cleanups.push(() => idler.close());
    const tcp = () => createProxySocketFactory();
    for (const extra of [{}, { tcp }]) {
      expect(() => createIdlingProxySocketFactory({ idler, ...extra, maxUdpSessions: -5 })).toThrow(
        InvalidOptionError,
      );
      expect(() => createIdlingProxySocketFactory({ idler, ...extra, dialTimeoutsMs: [] })).toThrow(
        InvalidOptionError,
      );
    }
  });

  it('holds a client, keeps its early bytes, and relays them once endpoints come', async () => {
    const recorder = new RecordingRecorder();
    const idler = new Idler({ recorder });
    cleanups.push(() => idler.close());
    const s = await open('TCP', idler);
    const backend = await tcpBackend(s.ip);
    cleanups.push(() => backend.close());
    const client = await connect(s.ip, s.port);
    cleanups.push(() => client.destroy());
    client.write('GET /');
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(1));
    expect(recorder.events.map((e) => e.reason)).toEqual(['NeedPods']);
    expect(s.socket.activeConnections?.()).toBe(1);
    s.publish(s.ip, backend.port);
    expect(await firstBytes(client, 'ok:GET /'.length)).toBe('ok:GET /');
    expect(backend.received.join('')).toBe('GET /');
    expect(idler.stats()).toMatchObject({ handedOver: 1, handOverFailures: 0, heldNow: 0 });
  });

  it('proxies a client that arrives while endpoints exist', async () => {
    const idler = new Idler();
    cleanups.push(() => idler.close());
    const s = await open('TCP', idler);
    const backend = await tcpBackend(s.ip);
    cleanups.push(() => backend.close());
    s.publish(s.ip, backend.port);
    const client = await connect(s.ip, s.port);
    cleanups.push(() => client.destroy());
    client.write('x');
    expect(await firstBytes(client, 4)).toBe('ok:x');
    expect(idler.stats().handedOver).toBe(0);
  });

  it('closes the oldest client beyond the per-port bound; the others are handed over', async () => {
    const idler = new Idler({ maxHeldPerServicePort: 2 });
    cleanups.push(() => idler.close());
    const s = await open('TCP', idler);
    const clients: net.Socket[] = [];
    for (const text of ['a', 'b', 'c']) {
      const c = await connect(s.ip, s.port);
      cleanups.push(() => c.destroy());
      c.write(text);
      clients.push(c);
      await vi.waitFor(() =>
        expect(idler.stats().released + idler.stats().heldNow).toBe(clients.length),
      );
    }
    const [a, b, c] = clients as [net.Socket, net.Socket, net.Socket];
    expect(await closed(a)).toBe('');
    expect(idler.stats()).toMatchObject({ evictions: 1, heldNow: 2 });
    const backend = await tcpBackend(s.ip);
    cleanups.push(() => backend.close());
    s.publish(s.ip, backend.port);
    expect(await firstBytes(b, 4)).toBe('ok:b');
    expect(await firstBytes(c, 4)).toBe('ok:c');
  });

  it('a failed dial after hand-over closes that client only', async () => {
    const idler = new Idler();
    cleanups.push(() => idler.close());
    const ip = randomLoopback();
    const backend = await tcpBackend(ip);
    cleanups.push(() => backend.close());
    // A port nobody listens on: the first hand-over's only dial attempt is refused.
    const dead = net.createServer();
    await new Promise<void>((resolve) => dead.listen(0, ip, resolve));
    const deadPort = (dead.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => dead.close(() => resolve()));
    let dials = 0;
    const s = await open('TCP', idler, {
      connect: (options) =>
        net.connect({ ...options, port: dials++ === 0 ? deadPort : options.port }),
    });
    const first = await connect(s.ip, s.port);
    cleanups.push(() => first.destroy());
    first.write('1');
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(1));
    const second = await connect(s.ip, s.port);
    cleanups.push(() => second.destroy());
    second.write('2');
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(2));
    s.publish(ip, backend.port);
    await closed(first);
    expect(await firstBytes(second, 4)).toBe('ok:2');
    await vi.waitFor(() => expect(idler.stats().handOverFailures).toBe(1));
    expect(backend.received).toEqual(['2']);
  });

  it('drops a client that goes away while held at once', async () => {
    const idler = new Idler();
    cleanups.push(() => idler.close());
    const s = await open('TCP', idler);
    const client = await connect(s.ip, s.port);
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(1));
    client.destroy();
    await vi.waitFor(() => expect(idler.stats().clientsClosed).toBe(1));
    expect(idler.stats().heldNow).toBe(0);
    await vi.waitFor(() => expect(s.socket.activeConnections?.()).toBe(0));
  });

  it('delegates other protocols to the base factory, or refuses them', async () => {
    const idler = new Idler();
    const lb = new RoundRobinLoadBalancer();
    const context = createSocketContext({ loadBalancer: lb, protocol: 'SCTP' });
    await expect(createIdlingProxySocketFactory({ idler })(context)).rejects.toBeInstanceOf(
      UnsupportedProtocolError,
    );
    const fake = {
      addr: () => ({ address: '', port: 1, family: 'IPv4' }),
    } as unknown as ProxySocket;
    const base = vi.fn(async () => fake);
    expect(await createIdlingProxySocketFactory({ idler, base })(context)).toBe(fake);
    expect(base).toHaveBeenCalledWith(context);
  });
});

function udpClient(host: string): Promise<dgram.Socket & { replies: string[] }> {
  const socket = dgram.createSocket('udp4') as dgram.Socket & { replies: string[] };
  socket.replies = [];
  socket.on('message', (msg) => socket.replies.push(msg.toString()));
  return new Promise((resolve) => socket.bind(0, host, () => resolve(socket)));
}

describe('the idling UDP socket on loopback', () => {
  it('drops datagrams while idled, asks for pods once per burst, and relays once endpoints come', async () => {
    const recorder = new RecordingRecorder();
    const idler = new Idler({ recorder });
    cleanups.push(() => idler.close());
    const s = await open('UDP', idler);
    const client = await udpClient(s.ip);
    cleanups.push(() => client.close());
    for (let i = 0; i < 3; i++) client.send(`d${i}`, s.port, s.ip);
    await vi.waitFor(() => expect(idler.stats().udpDropped).toBe(3));
    expect(recorder.events).toHaveLength(1);
    expect(recorder.events[0]?.message).toBe('The service-port ns/web:p needs pods.');
    const backend = await udpBackend(s.ip);
    cleanups.push(() => backend.close());
    s.publish(s.ip, backend.port);
    client.send('live', s.port, s.ip);
    await vi.waitFor(() => expect(client.replies).toEqual(['ok:live']));
    expect(backend.received).toEqual(['live']);
  });

  it('opt-in: buffers a few datagrams and replays them with the client address', async () => {
    const idler = new Idler({ udpBufferDatagrams: 2 });
    cleanups.push(() => idler.close());
    const s = await open('UDP', idler);
    const client = await udpClient(s.ip);
    cleanups.push(() => client.close());
    for (const d of ['one', 'two', 'three']) client.send(d, s.port, s.ip);
    await vi.waitFor(() => expect(idler.stats().udpBuffered + idler.stats().udpDropped).toBe(3));
    expect(idler.stats()).toMatchObject({ udpBuffered: 2, udpDropped: 1 });
    const backend = await udpBackend(s.ip);
    cleanups.push(() => backend.close());
    s.publish(s.ip, backend.port);
    await vi.waitFor(() => expect(client.replies.sort()).toEqual(['ok:one', 'ok:two']));
    expect(idler.stats().udpReplayed).toBe(2);
  });
});
