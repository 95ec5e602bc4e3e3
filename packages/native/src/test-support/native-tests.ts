/**
 * The set-up every native test repeats: whether the helpers can be built, a cleanup list run
 * after each test, random loopback addresses (parallel runs do not collide), and a Proxier over
 * a native factory with one Service and its EndpointSlice.
 */
import { spawnSync } from 'node:child_process';
import type net from 'node:net';
import {
  type EndpointSlice,
  type Endpoints,
  newCustomProxier,
  type Proxier,
  type ProxySocket,
  type ProxySocketFactory,
  type Service,
  type ServiceInfo,
} from '@userspace-proxy/core';
import { splitHostPort } from '@userspace-proxy/core/sockets';
import { afterEach } from 'vitest';
import { startTcpServer, type TcpTestServer } from '../../../core/src/test-support/echo-servers.js';
import { connectTcp, readToEnd } from '../../../core/src/test-support/net-clients.js';

/**
 * A TCP echo backend on a random loopback address, closed by `cleanup` after the test;
 * `onConnection` replaces the echo when a test needs the backend to behave otherwise.
 */
export async function startBackend(
  cleanup: Array<() => unknown>,
  onConnection?: (socket: net.Socket) => void,
): Promise<TcpTestServer> {
  const s = await startTcpServer({
    host: randomLoopback(),
    ...(onConnection ? { onConnection } : {}),
  });
  cleanup.push(() => s.close());
  return s;
}

/** The helpers are compiled with the system C compiler (.ci/run installs gcc); without one tests skip. */
export const HAS_CC = spawnSync('cc', ['--version']).status === 0;

/** Tests that read the helper's system calls run it under strace (.ci/run installs it); without it they skip. */
export const HAS_STRACE = spawnSync('strace', ['-V']).status === 0;

/** A list of cleanups run (last first) after each test of the file that calls this. */
export function useCleanup(): Array<() => unknown> {
  const cleanup: Array<() => unknown> = [];
  afterEach(async () => {
    for (const f of cleanup.splice(0).reverse()) await f();
  });
  return cleanup;
}

/** Where `prlimit` is: the descriptor-limit tests skip without it. */
export const PRLIMIT = '/usr/bin/prlimit';

/** A random 127.x.y. prefix: a test file's own /24, so its many listeners never meet another's. */
export function randomLoopbackNet(): string {
  const r = (): number => 1 + Math.floor(Math.random() * 254);
  return `127.${r()}.${r()}.`;
}

/** Core's Endpoints of Service `name` in namespace `ns`: one address and port, named `portName`. */
export function oneEndpoint(name: string, portName: string, hostPort: string): Endpoints {
  const { host, port } = splitHostPort(hostPort) ?? { host: hostPort, port: 0 };
  return {
    metadata: { namespace: 'ns', name },
    subsets: [{ addresses: [{ ip: host }], ports: [{ name: portName, port }] }],
  };
}

/** A random 127.x.y.z address. */
export function randomLoopback(): string {
  const r = (): number => 1 + Math.floor(Math.random() * 254);
  return `127.${r()}.${r()}.${r()}`;
}

/** One port of a Service in namespace `ns`, and the EndpointSlices that serve it. */
export interface TestService {
  readonly name: string;
  readonly portName: string;
  readonly port: number;
  readonly protocol: 'TCP' | 'UDP';
}

/** The Service `s` at cluster IP `ip`. */
export function serviceAt(s: TestService, ip: string): Service {
  return {
    metadata: { namespace: 'ns', name: s.name },
    spec: { clusterIP: ip, ports: [{ name: s.portName, port: s.port, protocol: s.protocol }] },
  };
}

/** An EndpointSlice of `s`: every address in `ips` ready, on `port`. */
export function sliceOf(s: TestService, ips: string[], port: number): EndpointSlice {
  return {
    metadata: {
      namespace: 'ns',
      name: `${s.name}-1`,
      labels: { 'kubernetes.io/service-name': s.name },
    },
    addressType: 'IPv4',
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } })),
    ports: [{ name: s.portName, port, protocol: s.protocol }],
  };
}

/** A service-port-portal Proxier over `factory`, its sync loop running and synced; cleaned up. */
export async function startProxier(
  factory: ProxySocketFactory,
  cleanup: Array<() => unknown>,
): Promise<Proxier> {
  const proxier = await newCustomProxier(
    { mode: 'service-port-portal', minSyncPeriodMs: 5, syncPeriodMs: 1000, nodePortAddresses: [] },
    factory,
  );
  const stop = new AbortController();
  const loop = proxier.syncLoop(stop.signal);
  cleanup.push(async () => {
    stop.abort();
    await loop;
    await proxier.shutdown();
  });
  proxier.onServiceSynced();
  proxier.onEndpointSlicesSynced();
  return proxier;
}

/** Runs `socket`'s proxyLoop with `info`; the cleanup aborts `ctx`, closes the socket, ends the loop. */
export function proxyInTest(
  socket: Pick<ProxySocket, 'proxyLoop' | 'close'>,
  ctx: { abort(): void },
  info: ServiceInfo,
  cleanup: Array<() => unknown>,
): void {
  const loop = socket.proxyLoop(info);
  cleanup.push(async () => {
    ctx.abort();
    await socket.close();
    await loop;
  });
}

/** True once every helper thread of `socket` holds the current picks made ahead. */
export function picksSettled(socket: {
  picksAhead(): { epoch: number; taken: readonly number[] } | undefined;
}): boolean {
  const s = socket.picksAhead();
  return s?.taken.every((e) => e === s.epoch) ?? false;
}

/** One short connection through `socket` to an echo backend: "hi" and a FIN; what came back. */
export async function helloThrough(socket: {
  addr(): { address: string; port: number };
}): Promise<string> {
  const { address: host, port } = socket.addr();
  const c = await connectTcp(port, host);
  const done = readToEnd(c);
  c.end('hi');
  return (await done).data.toString();
}
