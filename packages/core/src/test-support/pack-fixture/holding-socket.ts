/**
 * The program that pack-install.test.ts compiles and runs in a fresh npm project outside the
 * workspace, against @userspace-proxy/core installed from its `pnpm pack` tarball. It must use the
 * published surface only (the root entry point and the documented subpaths), because that is all a
 * third party has. The test compiles it with `strict` and `skipLibCheck: false`, runs it with node,
 * and expects the line "OK" on stdout and exit code 0.
 *
 * For now it proves the plain path: a Proxier in service-port-portal mode, one Service on a random
 * 127.x.y.z address, one echo endpoint, a round trip through the proxy. It is meant to grow into a
 * holding socket built on the accept-policy surface (issue 9): replace the body, keep the contract
 * (print "OK", exit 0; print what went wrong and exit non-zero otherwise).
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import {
  type Endpoints,
  EndpointsConfig,
  newProxier,
  type Service,
  ServiceConfig,
  StaticInformer,
} from '@userspace-proxy/core';
import { LogLimiter } from '@userspace-proxy/core/sockets';

/** The whole program gives up after this long, so a hang fails the test with a message. */
const DEADLINE_MS = 20_000;

/** A random 127.x.y.z address outside 127.0.0.0/16, so parallel runs on one host do not collide. */
function randomLoopback(): string {
  const byte = (lo: number, hi: number): number => lo + Math.floor(Math.random() * (hi - lo + 1));
  return `127.${byte(20, 250)}.${byte(1, 250)}.${byte(1, 250)}`;
}

/** A TCP server on 127.0.0.1 that writes back whatever it reads. */
async function echoServer(): Promise<{ server: Server; port: number }> {
  const server = createServer((socket) => socket.pipe(socket));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('echo server: no address');
  return { server, port: address.port };
}

/** Connects once; resolves with the socket, rejects with the connection error. */
function dial(host: string, port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    socket.once('connect', () => {
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

/** Dials until the proxy listens (syncs are asynchronous), logging refusals at most once a second. */
async function dialUntilListening(host: string, port: number, deadline: number): Promise<Socket> {
  const quiet = new LogLimiter(1_000);
  for (;;) {
    try {
      return await dial(host, port);
    } catch (error) {
      if (Date.now() > deadline) throw error;
      const suppressed = quiet.take();
      if (suppressed >= 0) {
        console.error(`waiting for ${host}:${port}: ${String(error)} (${suppressed} more)`);
      }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }
}

/** Writes `text` and resolves with what comes back once as many bytes have arrived. */
function roundTrip(socket: Socket, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      received += chunk;
      if (received.length >= text.length) resolve(received);
    });
    socket.once('error', reject);
    socket.once('close', () => reject(new Error(`closed after ${JSON.stringify(received)}`)));
    socket.write(text);
  });
}

async function main(): Promise<void> {
  const deadline = Date.now() + DEADLINE_MS;
  const timer = setTimeout(() => {
    console.error(`no result within ${DEADLINE_MS} ms`);
    process.exit(2);
  }, DEADLINE_MS + 2_000);

  const echo = await echoServer();
  const ip = randomLoopback();
  const port = 20_000 + Math.floor(Math.random() * 40_000);

  const services = new StaticInformer<Service>({ kind: 'Service' });
  const endpoints = new StaticInformer<Endpoints>({ kind: 'Endpoints' });
  const proxier = await newProxier({ mode: 'service-port-portal' });
  const serviceConfig = new ServiceConfig(services);
  serviceConfig.registerEventHandler(proxier);
  const endpointsConfig = new EndpointsConfig(endpoints);
  endpointsConfig.registerEventHandler(proxier);

  const stopping = new AbortController();
  const running = Promise.all([
    serviceConfig.run(stopping.signal),
    endpointsConfig.run(stopping.signal),
    proxier.syncLoop(stopping.signal),
  ]);

  services.add({
    metadata: { namespace: 'demo', name: 'echo' },
    spec: { clusterIP: ip, ports: [{ name: 'tcp', protocol: 'TCP', port }] },
  });
  endpoints.add({
    metadata: { namespace: 'demo', name: 'echo' },
    subsets: [
      {
        addresses: [{ ip: '127.0.0.1' }],
        ports: [{ name: 'tcp', protocol: 'TCP', port: echo.port }],
      },
    ],
  });

  try {
    const client = await dialUntilListening(ip, port, deadline);
    const reply = await roundTrip(client, 'ping through the proxy');
    client.destroy();
    if (reply !== 'ping through the proxy')
      throw new Error(`unexpected reply ${JSON.stringify(reply)}`);
    console.log('OK');
  } finally {
    stopping.abort();
    await proxier.shutdown();
    await running;
    await new Promise((resolve) => echo.server.close(resolve));
    clearTimeout(timer);
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
