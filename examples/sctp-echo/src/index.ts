/**
 * An SCTP echo Service through userspace-proxy: an echo server on our SCTP engine (or usrsctp's
 * `echo_server`), a Proxier in service-port-portal mode whose SCTP sockets come from
 * `@userspace-proxy/sctp`'s `withSctp`, as the daemon builds it, and a client that checks each echo
 * keeps its stream, PPID and bytes.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createProxySocketFactory, newCustomProxier, type Proxier } from '@userspace-proxy/core';
import {
  createUserspaceSctpEngine,
  type SctpAssociation,
  type SctpEngine,
  type SctpMessage,
  withSctp,
} from '@userspace-proxy/sctp';

/** Where usrsctp's example programs live (Debian libusrsctp-examples). */
export const USRSCTP_ECHO = `${process.env.USRSCTP_DIR ?? '/usr/lib/usrsctp'}/echo_server`;

/** Addresses and ports of the example. */
export interface EchoOptions {
  /** The Service's cluster IP (the proxy's portal). */
  readonly serviceIp: string;
  /** The Service's SCTP port. */
  readonly servicePort: number;
  /** Where the echo server runs (the Service's one endpoint). */
  readonly backendIp: string;
  /** The RFC 6951 UDP port on every address (portal and endpoint; usrsctp's gets the next one). */
  readonly encapsulationPort: number;
  /** Use usrsctp's echo_server as the backend instead of our engine (it listens on SCTP port 7). */
  readonly usrsctp?: boolean;
}

/** A running example: `stop` undoes everything. */
export interface RunningEcho {
  readonly proxier: Proxier;
  readonly backend: 'userspace engine' | 'usrsctp echo_server';
  /** A client engine: connect it to the Service. */
  readonly client: SctpEngine;
  stop(): Promise<void>;
}

/** Starts the echo backend, the Proxier and a client engine. */
export async function startEcho(o: EchoOptions): Promise<RunningEcho> {
  const server = createUserspaceSctpEngine();
  let backendPort = 7;
  let backendEncapsulationPort = o.encapsulationPort;
  let stopBackend = async (): Promise<void> => server.close();
  let backend: RunningEcho['backend'] = 'userspace engine';
  if (o.usrsctp && existsSync(USRSCTP_ECHO)) {
    // echo_server <local UDP port> <remote UDP port> binds every address (so a port of its own)
    // on SCTP port 7, and answers to the remote port it was given: the proxy's.
    backendEncapsulationPort = o.encapsulationPort === 65535 ? 65534 : o.encapsulationPort + 1;
    const child = spawn(
      USRSCTP_ECHO,
      [String(backendEncapsulationPort), String(o.encapsulationPort)],
      { stdio: 'ignore' },
    );
    stopBackend = async () => {
      child.kill();
      await server.close();
    };
    backend = 'usrsctp echo_server';
    await new Promise((r) => setTimeout(r, 300));
  } else {
    backendPort = 7;
    const l = await server.listen({
      address: o.backendIp,
      port: backendPort,
      encapsulationPort: o.encapsulationPort,
    });
    l.on('association', (a) =>
      a.on('message', (m) => {
        a.send({ streamId: m.streamId, ppid: m.ppid, unordered: m.unordered, data: m.data });
      }),
    );
  }
  const factory = withSctp(createProxySocketFactory({}), {
    encapsulationPort: o.encapsulationPort,
    endpointEncapsulationPort: backendEncapsulationPort,
  });
  const proxier = await newCustomProxier(
    { mode: 'service-port-portal', nodePortAddresses: [], minSyncPeriodMs: 0 },
    factory,
  );
  const stopLoop = new AbortController();
  const loop = proxier.syncLoop(stopLoop.signal);
  const meta = { namespace: 'demo', name: 'echo' };
  proxier.onEndpointsAdd({
    metadata: meta,
    subsets: [
      {
        addresses: [{ ip: o.backendIp }],
        ports: [{ name: 'echo', port: backendPort, protocol: 'SCTP' }],
      },
    ],
  });
  proxier.onServiceAdd({
    metadata: meta,
    spec: {
      clusterIP: o.serviceIp,
      ports: [{ name: 'echo', protocol: 'SCTP', port: o.servicePort }],
    },
  });
  proxier.onServiceSynced();
  proxier.onEndpointsSynced();
  const deadline = Date.now() + 10_000;
  while (proxier.getServiceInfo({ ...meta, port: 'echo' })?.isStarted() !== true) {
    if (Date.now() > deadline) throw new Error('the SCTP portal did not start within 10 s');
    await new Promise((r) => setTimeout(r, 10));
  }
  const client = createUserspaceSctpEngine();
  return {
    proxier,
    backend,
    client,
    stop: async () => {
      await client.close();
      await proxier.shutdown();
      stopLoop.abort();
      await loop;
      await stopBackend();
    },
  };
}

/** Sends `messages` through the Service and resolves with the echoes, in arrival order. */
export async function echo(
  a: SctpAssociation,
  messages: ReadonlyArray<{ streamId: number; ppid: number; data: Buffer }>,
  timeoutMs = 10_000,
): Promise<SctpMessage[]> {
  const got: SctpMessage[] = [];
  const done = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${got.length} of ${messages.length} echoes`)),
      timeoutMs,
    );
    a.on('message', (m) => {
      got.push(m);
      if (got.length === messages.length) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  for (const m of messages) {
    if (!a.send(m)) await new Promise<void>((r) => a.once('drain', () => r()));
  }
  await done;
  return got;
}
