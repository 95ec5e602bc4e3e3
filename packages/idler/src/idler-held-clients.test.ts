import net from 'node:net';
import { type ProxySocket, RoundRobinLoadBalancer } from '@userspace-proxy/core';
import { createServiceInfo, createSocketContext } from '@userspace-proxy/core/sockets';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Idler } from './idler.js';
import { createIdlingProxySocketFactory } from './idling-socket-factory.js';
import {
  closed,
  connect,
  endpointsOf,
  firstBytes,
  randomLoopback,
  tcpBackend,
} from './test-support/fakes.js';

/**
 * Adversarial held clients on loopback: half-closes, resets, more than the hold buffer, a client
 * that leaves during its hand-over dial, endpoints that refuse.
 */

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

async function open(
  idler: Idler,
  extra: Partial<Parameters<typeof createIdlingProxySocketFactory>[0]> = {},
) {
  const lb = new RoundRobinLoadBalancer();
  const ip = randomLoopback();
  const servicePort = { namespace: 'ns', name: 'web', port: 'p', protocol: 'TCP' as const };
  const context = createSocketContext({ loadBalancer: lb, protocol: 'TCP', ip, servicePort });
  const factory = createIdlingProxySocketFactory({ idler, dialTimeoutsMs: [500], ...extra });
  const socket: ProxySocket = await factory(context);
  void socket.proxyLoop(createServiceInfo(context));
  cleanups.push(() => socket.close());
  const publish = (host: string, port: number) => {
    lb.onEndpointsAdd(endpointsOf('ns', 'web', [host], port, 'p'));
    context.notifyEndpointsChanged();
  };
  return { lb, ip, context, socket, port: socket.addr().port, publish };
}

/** A backend that collects each connection's bytes until its FIN, then answers and closes. */
async function collectingBackend(host: string) {
  const got: Buffer[][] = [];
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    const chunks: Buffer[] = [];
    got.push(chunks);
    socket.on('error', () => {});
    socket.on('data', (c) => chunks.push(c));
    socket.on('end', () => socket.end(`got:${Buffer.concat(chunks).length}`));
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { port: (server.address() as net.AddressInfo).port, got };
}

function connectHalfOpen(host: string, port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port, allowHalfOpen: true }, () => {
      socket.removeListener('error', reject);
      socket.on('error', () => {});
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

/** Writes and waits until the kernel has the bytes (so a reset after it is a real RST). */
function written(socket: net.Socket, data: string | Buffer): Promise<void> {
  return new Promise((resolve, reject) =>
    socket.write(data, (error) => (error ? reject(error) : setTimeout(resolve, 10))),
  );
}

describe('held clients that misbehave (loopback)', () => {
  it('a client that sends its request and half-closes stays held; the backend gets the bytes and the FIN, the client the answer', async () => {
    const idler = new Idler();
    cleanups.push(() => idler.close());
    const s = await open(idler);
    const client = await connectHalfOpen(s.ip, s.port);
    cleanups.push(() => client.destroy());
    client.end('GET / HTTP/1.0\r\n\r\n');
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(1));
    // The FIN after a request keeps it held (it may wait for the answer).
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(idler.stats()).toMatchObject({ heldNow: 1, clientsClosed: 0 });
    const backend = await collectingBackend(s.ip);
    s.publish(s.ip, backend.port);
    expect(await closed(client)).toBe('got:18');
    expect(idler.stats()).toMatchObject({ handedOver: 1, handOverFailures: 0 });
  });

  it('a client that half-closes with nothing sent is dropped at once', async () => {
    const idler = new Idler();
    cleanups.push(() => idler.close());
    const s = await open(idler);
    const client = await connectHalfOpen(s.ip, s.port);
    cleanups.push(() => client.destroy());
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(1));
    client.end();
    await vi.waitFor(() => expect(idler.stats().clientsClosed).toBe(1));
    expect(idler.stats().heldNow).toBe(0);
    await vi.waitFor(() => expect(s.socket.activeConnections?.()).toBe(0));
  });

  it('a client that sent bytes and then resets is dropped at once', async () => {
    const idler = new Idler();
    cleanups.push(() => idler.close());
    const s = await open(idler);
    const client = await connect(s.ip, s.port);
    await written(client, 'half a request');
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(1));
    client.resetAndDestroy();
    await vi.waitFor(() => expect(idler.stats().clientsClosed).toBe(1));
    expect(idler.stats().heldNow).toBe(0);
    expect(idler.budget.held).toBe(0);
  });

  it('a client that sends more than the hold buffer while held loses no byte after the hand-over', async () => {
    const idler = new Idler();
    cleanups.push(() => idler.close());
    const s = await open(idler, { holdBufferBytes: 4096 });
    const client = await connectHalfOpen(s.ip, s.port);
    cleanups.push(() => client.destroy());
    const body = Buffer.alloc(1024 * 1024, 7);
    client.end(body);
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(1));
    const backend = await collectingBackend(s.ip);
    s.publish(s.ip, backend.port);
    expect(await closed(client)).toBe(`got:${body.length}`);
    expect(Buffer.concat(backend.got[0] ?? []).equals(body)).toBe(true);
  });

  it('a client past its hold buffer is no longer read, so its reset is seen only at its hold timeout (documented)', async () => {
    const idler = new Idler({ holdTimeoutMs: 400 });
    cleanups.push(() => idler.close());
    const s = await open(idler, { holdBufferBytes: 4096 });
    const client = await connect(s.ip, s.port);
    // More than the hold buffer: the proxy stops reading it (TCP backpressure).
    client.write(Buffer.alloc(8 * 1024 * 1024, 1));
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(1));
    await new Promise((resolve) => setTimeout(resolve, 100));
    client.resetAndDestroy();
    await vi.waitFor(() => expect(idler.stats().released).toBe(1), { timeout: 3000 });
    // Not read, so the reset went unseen; the timeout still ends it.
    expect(idler.stats()).toMatchObject({ timeouts: 1, clientsClosed: 0, heldNow: 0 });
    await vi.waitFor(() => expect(s.socket.activeConnections?.()).toBe(0));
  });

  it('a client that leaves during its hand-over dial is a hand-over failure and frees its dial slot', async () => {
    const idler = new Idler({ handOverConcurrency: 1 });
    cleanups.push(() => idler.close());
    // The first dial never completes (a socket that is never connected); later ones do.
    const stuck: net.Socket[] = [];
    let dials = 0;
    const s = await open(idler, {
      dialTimeoutsMs: [60_000],
      connect: (options) => {
        if (dials++ === 0) {
          const never = new net.Socket();
          stuck.push(never);
          return never;
        }
        return net.connect(options);
      },
    });
    cleanups.push(() => {
      for (const n of stuck) n.destroy();
    });
    const backend = await tcpBackend(s.ip);
    cleanups.push(() => backend.close());
    const first = await connect(s.ip, s.port);
    await written(first, '1');
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(1));
    const second = await connect(s.ip, s.port);
    cleanups.push(() => second.destroy());
    second.write('2');
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(2));
    s.publish(s.ip, backend.port);
    // Only the first is dialling (concurrency 1), and its dial hangs.
    await vi.waitFor(() => expect(idler.stats().handedOver).toBe(1));
    expect(idler.stats().heldNow).toBe(1);
    first.resetAndDestroy();
    await vi.waitFor(() => expect(idler.stats().handOverFailures).toBe(1));
    // Its slot is free: the second is handed over and answered.
    expect(await firstBytes(second, 4)).toBe('ok:2');
    await vi.waitFor(() => expect(s.socket.activeConnections?.()).toBe(1));
  });

  it('when every endpoint refuses, each handed-over client is closed (RST: it sent a request) and counted', async () => {
    const idler = new Idler();
    cleanups.push(() => idler.close());
    const s = await open(idler);
    const dead = net.createServer();
    await new Promise<void>((resolve) => dead.listen(0, s.ip, resolve));
    const deadPort = (dead.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => dead.close(() => resolve()));
    const clients = await Promise.all([1, 2, 3].map(() => connect(s.ip, s.port)));
    const errors: string[] = [];
    for (const c of clients) {
      c.on('error', (e: NodeJS.ErrnoException) => errors.push(e.code ?? ''));
      c.write('req');
    }
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(3));
    s.publish(s.ip, deadPort);
    await Promise.all(clients.map((c) => closed(c)));
    await vi.waitFor(() => expect(idler.stats().handOverFailures).toBe(3));
    expect(idler.stats()).toMatchObject({ heldNow: 0, handedOver: 3 });
  });
});
