import net from 'node:net';
import { RoundRobinLoadBalancer, type ServiceInfo } from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Idler } from './idler.js';
import { createIdlingProxySocketFactory } from './idling-socket-factory.js';
import { endpointsOf, RecordingRecorder, randomLoopback } from './test-support/fakes.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

/** A backend that keeps every byte each connection sent. */
async function recordingBackend(host: string) {
  const received: Buffer[] = [];
  const server = net.createServer((socket) => {
    socket.on('error', () => {});
    socket.on('data', (chunk) => received.push(chunk));
    cleanups.push(() => socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen({ host, port: 0 }, resolve));
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  return {
    port: (server.address() as net.AddressInfo).port,
    text: () => Buffer.concat(received).toString(),
  };
}

describe('the idler hand-over with the PROXY protocol', () => {
  it('writes the header before the bytes a client sent while held', async () => {
    const idler = new Idler({ recorder: new RecordingRecorder() });
    cleanups.push(() => idler.close());
    const lb = new RoundRobinLoadBalancer();
    const ip = randomLoopback();
    const servicePort = { namespace: 'ns', name: 'web', port: 'p', protocol: 'TCP' as const };
    const context = createSocketContext({
      loadBalancer: lb,
      ip,
      servicePort,
      service: {
        metadata: {
          namespace: 'ns',
          name: 'web',
          annotations: { 'userspace-proxy.io/proxy-protocol': 'v1' },
        },
        spec: { ports: [{ name: 'p', port: 80, protocol: 'TCP' }] },
      },
    });
    const socket = await createIdlingProxySocketFactory({ idler })(context);
    cleanups.push(() => socket.close());
    void socket.proxyLoop({
      isAlive: () => true,
      udpIdleTimeoutMs: 10_000,
      activeClients: new Map(),
    } as unknown as ServiceInfo);
    const backend = await recordingBackend(ip);
    const client = net.connect({ host: ip, port: socket.addr().port });
    client.on('error', () => {});
    cleanups.push(() => client.destroy());
    await new Promise((resolve) => client.once('connect', resolve));
    client.write('GET /');
    await vi.waitFor(() => expect(idler.stats().heldNow).toBe(1));
    lb.onEndpointsAdd(endpointsOf('ns', 'web', [ip], backend.port, 'p'));
    context.notifyEndpointsChanged();
    const expected = `PROXY TCP4 ${client.localAddress} ${ip} ${client.localPort} ${socket.addr().port}\r\nGET /`;
    await vi.waitFor(() => expect(backend.text()).toBe(expected), { timeout: 5_000 });
  });
});
