import { connect, createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type PortalProxy, startPortalProxy, tcpEndpoints, tcpService } from './index.js';

/** A TCP server on 127.0.0.1 that answers every connection with `name` and closes. */
async function backend(name: string): Promise<{ port: number; server: Server }> {
  const server = createServer((socket) => socket.end(name));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  return { port: address.port, server };
}

/** What a server at host:port says, or the error code when the connection fails. */
function ask(host: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    let reply = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      reply += chunk;
    });
    socket.on('end', () => resolve(reply));
    socket.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
  });
}

/** Asks until the answer is `expected`, for up to 10 s: syncs are asynchronous. */
async function expectAnswer(host: string, port: number, expected: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  let last = '';
  while (Date.now() < deadline) {
    last = await ask(host, port);
    if (last === expected) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  expect(last).toBe(expected);
}

/** A free TCP port on 127.0.0.1 for a node port (the OS picks it; nothing else will take it soon). */
async function freePort(): Promise<number> {
  const { port, server } = await backend('');
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A random 127.1.x.y "cluster IP", so parallel test files never share one. */
function clusterIP(): string {
  return `127.1.${100 + Math.floor(Math.random() * 150)}.${1 + Math.floor(Math.random() * 250)}`;
}

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setup(): Promise<PortalProxy> {
  const proxy = await startPortalProxy();
  cleanups.push(() => proxy.stop());
  return proxy;
}

async function server(name: string): Promise<number> {
  const b = await backend(name);
  cleanups.push(() => new Promise((resolve) => b.server.close(resolve)));
  return b.port;
}

describe('service-port-portal example', () => {
  it('serves a Service on its cluster IP and its node port', async () => {
    const proxy = await setup();
    const port = await server('alpha');
    const ip = clusterIP();
    const nodePort = await freePort();
    proxy.services.add(tcpService('web', ip, 8080, nodePort));
    proxy.endpoints.add(tcpEndpoints('web', [{ ip: '127.0.0.1', port }]));
    await expectAnswer(ip, 8080, 'alpha');
    await expectAnswer('127.0.0.1', nodePort, 'alpha');
  });

  it('follows endpoint changes, Service changes and deletion', async () => {
    const proxy = await setup();
    const alpha = await server('alpha');
    const beta = await server('beta');
    const ip = clusterIP();
    proxy.endpoints.add(tcpEndpoints('web', [{ ip: '127.0.0.1', port: alpha }]));
    proxy.services.add(tcpService('web', ip, 8080));
    await expectAnswer(ip, 8080, 'alpha');

    proxy.endpoints.update(tcpEndpoints('web', [{ ip: '127.0.0.1', port: beta }]));
    await expectAnswer(ip, 8080, 'beta');

    proxy.services.update(tcpService('web', ip, 8081));
    await expectAnswer(ip, 8081, 'beta');
    await expectAnswer(ip, 8080, 'ECONNREFUSED');

    proxy.services.delete('demo/web');
    await expectAnswer(ip, 8081, 'ECONNREFUSED');
  });
});
