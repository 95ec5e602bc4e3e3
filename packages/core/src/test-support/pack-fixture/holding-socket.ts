/**
 * The program that pack-install.test.ts compiles and runs in a fresh npm project outside the
 * workspace, against @userspace-proxy/core installed from its `pnpm pack` tarball. It uses the
 * published surface only (the root entry point and the documented subpaths), because that is all a
 * third party has. The test compiles it with `strict` and `skipLibCheck: false`, runs it with node,
 * and expects the line "OK" on stdout and exit code 0.
 *
 * What it proves (issue 9): a holding socket is an accept policy plus a queue. A Service with no
 * endpoints is served by the default TCP socket with a policy that holds every client; a client
 * connects and sends its request at once; the endpoint then appears; the push signal of the
 * socket's context hands the held client over; and the early bytes reach the backend first.
 */

import diagnosticsChannel from 'node:diagnostics_channel';
import { connect, createServer, type Server, type Socket } from 'node:net';
import {
  type AcceptedConnection,
  type AcceptPolicy,
  createProxySocketFactory,
  newCustomProxier,
  type ProxySocketContext,
} from '@userspace-proxy/core';
import { CHANNELS, type RefusedMessage } from '@userspace-proxy/core/diagnostics';
import { LogLimiter } from '@userspace-proxy/core/sockets';

/** The whole program gives up after this long, so a hang fails the test with a message. */
const DEADLINE_MS = 20_000;

/** A random 127.x.y.z address outside 127.0.0.0/16, so parallel runs on one host do not collide. */
function randomLoopback(): string {
  const byte = (lo: number, hi: number): number => lo + Math.floor(Math.random() * (hi - lo + 1));
  return `127.${byte(20, 250)}.${byte(1, 250)}.${byte(1, 250)}`;
}

/** A backend that records the first bytes each connection sends and answers "<bytes>!". */
async function recordingBackend(): Promise<{ server: Server; port: number; seen: string[] }> {
  const seen: string[] = [];
  const server = createServer((socket) => {
    socket.setEncoding('utf8');
    socket.once('data', (chunk: string) => {
      seen.push(chunk);
      socket.end(`${chunk}!`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('backend: no address');
  return { server, port: address.port, seen };
}

/** Holds every client while the Service port has no endpoints; hands them over when they come. */
class HoldingPolicy implements AcceptPolicy {
  readonly held: AcceptedConnection[] = [];
  readonly #context: ProxySocketContext;
  readonly #off: () => void;

  constructor(context: ProxySocketContext) {
    this.#context = context;
    this.#off = context.onEndpointsChanged(({ hasEndpoints }) => {
      if (hasEndpoints) for (const connection of this.held.splice(0)) connection.proxy();
    });
  }

  accept(connection: AcceptedConnection): 'proxy' | 'hold' {
    if (this.#context.loadBalancer.serviceHasEndpoints(this.#context.servicePort)) return 'proxy';
    this.held.push(connection);
    return 'hold';
  }

  close(): void {
    this.#off();
  }
}

/** Dials until the proxy listens (syncs are asynchronous), logging refusals at most once a second. */
async function dialUntilListening(host: string, port: number, deadline: number): Promise<Socket> {
  const quiet = new LogLimiter(1_000);
  for (;;) {
    try {
      return await new Promise<Socket>((resolve, reject) => {
        const socket = connect({ host, port });
        socket.once('connect', () => {
          socket.off('error', reject);
          resolve(socket);
        });
        socket.once('error', reject);
      });
    } catch (error) {
      if (Date.now() > deadline) throw error;
      if (quiet.take() >= 0) console.error(`waiting for ${host}:${port}: ${String(error)}`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }
}

async function main(): Promise<void> {
  const deadline = Date.now() + DEADLINE_MS;
  const backend = await recordingBackend();
  const refusals: RefusedMessage[] = [];
  diagnosticsChannel.subscribe(CHANNELS.refused, (m) => refusals.push(m as RefusedMessage));
  const policies: HoldingPolicy[] = [];
  const factory = createProxySocketFactory({
    acceptPolicy: (context) => {
      const policy = new HoldingPolicy(context);
      policies.push(policy);
      return policy;
    },
  });
  const proxier = await newCustomProxier(
    { mode: 'service-port-portal', nodePortAddresses: [] },
    factory,
  );
  const stop = new AbortController();
  const loop = proxier.syncLoop(stop.signal);
  const ip = randomLoopback();
  const svc = { namespace: 'demo', name: 'held', port: 'http' };
  proxier.onServiceAdd({
    metadata: { namespace: 'demo', name: 'held' },
    spec: { clusterIP: ip, ports: [{ name: 'http', protocol: 'TCP', port: 8080 }] },
  });
  proxier.onServiceSynced();
  proxier.onEndpointsSynced();
  try {
    const client = await dialUntilListening(ip, 8080, deadline);
    client.setEncoding('utf8');
    let reply = '';
    client.on('data', (chunk: string) => {
      reply += chunk;
    });
    const ended = new Promise<void>((resolve) => client.once('end', resolve));
    client.write('early-bytes');
    // Wait until the socket holds the client and has read what it sent.
    while (policies[0]?.held[0]?.heldBytes !== 'early-bytes'.length) {
      if (Date.now() > deadline) throw new Error('the client was never held');
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    if (backend.seen.length !== 0) throw new Error('the backend heard from a held client');
    proxier.onEndpointsAdd({
      metadata: { namespace: 'demo', name: 'held' },
      subsets: [
        { addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'http', port: backend.port }] },
      ],
    });
    await ended;
    if (backend.seen[0] !== 'early-bytes')
      throw new Error(`the backend saw ${String(backend.seen[0])}`);
    if (reply !== 'early-bytes!') throw new Error(`the client got ${JSON.stringify(reply)}`);
    if (proxier.getServiceInfo(svc) === undefined) throw new Error('no ServiceInfo');
    if (refusals.length !== 0) throw new Error(`unexpected refusals: ${JSON.stringify(refusals)}`);
    console.log('OK');
  } finally {
    await proxier.shutdown();
    stop.abort();
    await loop;
    backend.server.close();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
