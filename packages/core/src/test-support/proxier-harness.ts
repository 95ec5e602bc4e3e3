import diagnosticsChannel from 'node:diagnostics_channel';
import net from 'node:net';
import { afterEach, expect, vi } from 'vitest';
import {
  CHANNELS,
  type ObjectRejectedMessage,
  type ServiceChangeMessage,
  type SyncMessage,
} from '../diagnostics.js';
import { SocketOpenError } from '../errors.js';
import type { ConntrackCleaner } from '../hooks/conntrack.js';
import { EmitterEventRecorder, type RecordedEvent } from '../hooks/event-recorder-emitter.js';
import type { Portal, PortalManager } from '../hooks/portal-manager.js';
import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import { RoundRobinLoadBalancer } from '../load-balancing/load-balancer-round-robin.js';
import type { Addr, Endpoints, Protocol, Service } from '../model/model.js';
import type { ServiceInfo } from '../model/service-info.js';
import type { NetworkInterfacesFn } from '../proxier/node-port-addresses.js';
import type { ProxierOptions } from '../proxier/proxier.js';
import { newCustomProxier } from '../proxier/proxier-factory.js';
import type { UserspaceProxier } from '../proxier/proxier-userspace.js';
import type {
  ProxySocket,
  ProxySocketContext,
  ProxySocketFactory,
} from '../sockets/proxy-socket.js';
import {
  startTcpServer,
  startUdpEchoServer,
  type TcpTestServer,
  type UdpEchoServer,
} from './echo-servers.js';
import { fakeHost } from './fake-host.js';
import { udpClient } from './net-clients.js';
import { waitFor } from './wait-for.js';

/**
 * Test helpers for the Proxier: fake sockets that bind nothing, a PortalManager and a
 * ConntrackCleaner that record, Service and Endpoints builders, and a harness that runs a Proxier's
 * sync loop and waits for the sync an action causes (never for a fixed time).
 */

/** A ProxySocket that binds nothing; `proxyLoop` runs until `close`. */
export class FakeSocket implements ProxySocket {
  closed = false;
  info: ServiceInfo | undefined;
  #endLoop: (() => void) | undefined;
  constructor(
    readonly protocol: Protocol,
    readonly ip: string | null,
    readonly requested: number,
    readonly bound: number,
  ) {}
  addr(): Addr {
    return { address: this.ip ?? '0.0.0.0', port: this.bound };
  }
  listenPort(): number {
    return this.requested;
  }
  /** The context the factory was called with. */
  context: ProxySocketContext | undefined;
  proxyLoop(info: ServiceInfo): Promise<void> {
    this.info = info;
    return new Promise((resolve) => {
      this.#endLoop = resolve;
    });
  }
  async close(): Promise<void> {
    this.closed = true;
    this.#endLoop?.();
  }
}

/** A factory of {@link FakeSocket}s; port 0 gets 40000, 40001, … */
export class FakeSockets {
  readonly all: FakeSocket[] = [];
  /** Return true to make that bind fail with a SocketOpenError. */
  fail: (protocol: Protocol, ip: string | null, port: number) => boolean = () => false;
  #next = 40_000;
  readonly make: ProxySocketFactory = async (context) => {
    const { protocol, ip, port } = context;
    if (this.fail(protocol, ip, port)) {
      throw new SocketOpenError(`${ip ?? '*'}:${port}`, { cause: new Error('EADDRINUSE') });
    }
    const socket = new FakeSocket(protocol, ip, port, port === 0 ? this.#next++ : port);
    socket.context = context;
    this.all.push(socket);
    return socket;
  };
  open(): FakeSocket[] {
    return this.all.filter((s) => !s.closed);
  }
  openOn(ip: string | null, port?: number): FakeSocket[] {
    return this.open().filter((s) => s.ip === ip && (port === undefined || s.requested === port));
  }
}

/** A PortalManager that records what is open; `failClose` makes every close reject. */
export class RecordingPortals implements PortalManager {
  readonly opened = new Map<string, Portal>();
  readonly log: string[] = [];
  failClose = false;
  static key(p: Portal): string {
    return `${p.kind} ${p.ip ?? '*'}:${p.port}/${p.protocol} -> ${p.proxyIP}:${p.proxyPort}`;
  }
  async open(p: Portal): Promise<void> {
    this.opened.set(RecordingPortals.key(p), p);
    this.log.push(`open ${RecordingPortals.key(p)}`);
  }
  async close(p: Portal): Promise<void> {
    this.log.push(`close ${RecordingPortals.key(p)}`);
    if (this.failClose) throw new Error('iptables is broken');
    this.opened.delete(RecordingPortals.key(p));
  }
  async cleanupLeftovers(): Promise<void> {}
  /** The open portals, sorted, as "kind ip:port/PROTO" (without the proxy address). */
  summary(): string[] {
    return [...this.opened.values()]
      .map((p) => `${p.kind} ${p.ip ?? '*'}:${p.port}/${p.protocol}`)
      .sort();
  }
}

/** A ConntrackCleaner that records "ip/PROTO"; 10.0.0.99 fails. */
export class RecordingConntrack implements ConntrackCleaner {
  readonly cleared: string[] = [];
  async clearEntriesForIP(ip: string, protocol: Protocol): Promise<void> {
    this.cleared.push(`${ip}/${protocol}`);
    if (ip === '10.0.0.99') throw new Error('conntrack failed');
  }
}

/** A Service "ns/<name>" on 10.0.0.1 with one TCP port "p" 80, overridden by `spec`. */
export function service(
  name: string,
  spec: Partial<Service['spec']> = {},
  extra: Partial<Service> = {},
): Service {
  return {
    metadata: { namespace: 'ns', name, uid: `uid-${name}` },
    spec: { clusterIP: '10.0.0.1', ports: [{ name: 'p', port: 80, protocol: 'TCP' }], ...spec },
    ...extra,
  };
}

/** Endpoints "ns/<name>" with `ips` ready on one port. */
export function endpoints(name: string, ips: string[], port = 8080, portName = 'p'): Endpoints {
  return {
    metadata: { namespace: 'ns', name },
    subsets: [{ addresses: ips.map((ip) => ({ ip })), ports: [{ name: portName, port }] }],
  };
}

/** What the channels published since the last test. */
export const published = {
  syncs: [] as SyncMessage[],
  changes: [] as ServiceChangeMessage[],
  rejected: [] as ObjectRejectedMessage[],
};
diagnosticsChannel.subscribe(CHANNELS.sync, (m) => published.syncs.push(m as SyncMessage));
diagnosticsChannel.subscribe(CHANNELS.serviceChange, (m) =>
  published.changes.push(m as ServiceChangeMessage),
);
diagnosticsChannel.subscribe(CHANNELS.objectRejected, (m) =>
  published.rejected.push(m as ObjectRejectedMessage),
);

/** A running Proxier and what it used. */
export interface Harness {
  proxier: UserspaceProxier;
  sockets: FakeSockets;
  events: RecordedEvent[];
  lb: LoadBalancer;
  /** Runs `action`, then waits for the sync it causes to finish. */
  synced(action: () => void): Promise<void>;
}

/** Options of a harness: Proxier options, plus a socket factory other than the fake one. */
export interface HarnessOptions extends ProxierOptions {
  makeProxySocket?: ProxySocketFactory;
  networkInterfaces?: NetworkInterfacesFn;
}

/**
 * Registers an afterEach that shuts down every Proxier started and resets `published`; returns
 * `start`, which builds a Proxier (sync rate limits off, fake sockets and host unless overridden),
 * runs its sync loop and, unless `initialize` is false, marks Services and endpoints synced.
 */
export function useProxierHarness() {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0)) await cleanup();
    published.syncs.length = 0;
    published.changes.length = 0;
    published.rejected.length = 0;
    vi.useRealTimers();
  });
  return async function start(opts: HarnessOptions = {}, initialize = true): Promise<Harness> {
    const { makeProxySocket, networkInterfaces, ...proxierOptions } = opts;
    const sockets = new FakeSockets();
    const recorder = new EmitterEventRecorder();
    const events: RecordedEvent[] = [];
    recorder.on('event', (e) => events.push(e));
    const lb = opts.loadBalancer ?? new RoundRobinLoadBalancer();
    const proxier = (await newCustomProxier(
      {
        minSyncPeriodMs: 0,
        syncPeriodMs: 3_600_000,
        recorder,
        nodePortAddresses: ['all'],
        ...proxierOptions,
        loadBalancer: lb,
      },
      makeProxySocket ?? sockets.make,
      { networkInterfaces: networkInterfaces ?? fakeHost },
    )) as UserspaceProxier;
    const stop = new AbortController();
    const loop = proxier.syncLoop(stop.signal);
    cleanups.push(async () => {
      await proxier.shutdown();
      stop.abort();
      await loop;
    });
    const synced = async (action: () => void) => {
      const before = published.syncs.length;
      action();
      await vi.waitFor(() => expect(published.syncs.length).toBeGreaterThan(before), {
        timeout: 10_000,
        interval: 2,
      });
    };
    const h: Harness = { proxier, sockets, events, lb, synced };
    if (initialize) {
      await synced(() => {
        proxier.onServiceSynced();
        proxier.onEndpointsSynced();
      });
    }
    return h;
  };
}

// ---------------------------------------------------------------------------------------------
// Real sockets on loopback.

/** A random 127.1.x.y address to stand for a Service IP, so parallel test files never share one. */
export function loopbackServiceIP(): string {
  return `127.1.${100 + Math.floor(Math.random() * 150)}.${1 + Math.floor(Math.random() * 250)}`;
}

/** A TCP port free on 127.0.0.1 right now (the OS chose it), for node ports. */
export async function freeTcpPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * Connects to host:port, sends `payload` (if any) and half-closes, and resolves with everything
 * read back, or with the error code (ECONNREFUSED, ECONNRESET…) when the connection fails. A
 * connection the proxy closes without a byte (no endpoints) gives "".
 */
export function askTcp(host: string, port: number, payload = ''): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port, allowHalfOpen: true });
    let reply = '';
    let failed: string | undefined;
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.end(payload));
    socket.on('data', (chunk: string) => {
      reply += chunk;
    });
    socket.on('error', (error: NodeJS.ErrnoException) => {
      failed = error.code ?? 'error';
    });
    socket.on('close', () => resolve(failed !== undefined && reply === '' ? failed : reply));
  });
}

/** Asks until the reply is `expected` (10 s at most): syncs and endpoint changes are asynchronous. */
export async function untilTcp(
  host: string,
  port: number,
  expected: string,
  payload = '',
): Promise<void> {
  let last = '';
  try {
    await waitFor(async () => {
      last = await askTcp(host, port, payload);
      return last === expected;
    }, 10_000);
  } catch {
    expect(last, `${host}:${port}`).toBe(expected);
  }
}

/** Sends `payload` over UDP from a fresh client and resolves with the reply, or "" after 2 s. */
export async function askUdp(host: string, port: number, payload: string): Promise<string> {
  const client = await udpClient();
  try {
    client.send(payload, port, host);
    const { data } = await client.next(2_000);
    return data.toString();
  } catch {
    return '';
  } finally {
    await client.close();
  }
}

/** Asks over UDP until the reply is `expected` (10 s at most). */
export async function untilUdp(host: string, port: number, expected: string): Promise<void> {
  let last = '';
  try {
    await waitFor(async () => {
      last = await askUdp(host, port, 'ping');
      return last === expected;
    }, 10_000);
  } catch {
    expect(last, `udp ${host}:${port}`).toBe(expected);
  }
}

/** A TCP backend on 127.0.0.1 that answers every connection with `name` and closes. */
export function namedTcpServer(name: string): Promise<TcpTestServer> {
  return startTcpServer({ onConnection: (socket) => socket.end(name) });
}

/**
 * Backends on 127.0.0.1 that an afterEach (registered here) closes: `tcp()` echoes, `tcp(name)`
 * answers `name` and closes, `udp(prefix)` echoes datagrams with `prefix` in front.
 */
export function useBackends() {
  const backends: { close(): Promise<void> }[] = [];
  afterEach(async () => {
    for (const b of backends.splice(0)) await b.close();
  });
  const keep = <T extends { close(): Promise<void> }>(b: T): T => {
    backends.push(b);
    return b;
  };
  return {
    tcp: async (name?: string): Promise<TcpTestServer> =>
      keep(name === undefined ? await startTcpServer() : await namedTcpServer(name)),
    udp: async (prefix: string): Promise<UdpEchoServer> =>
      keep(await startUdpEchoServer({ prefix })),
  };
}
