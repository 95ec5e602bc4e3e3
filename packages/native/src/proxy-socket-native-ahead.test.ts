import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import {
  createProxySocketFactory,
  type Endpoints,
  RoundRobinLoadBalancer,
} from '@userspace-proxy/core';
import { CHANNELS, type ConnectionOpenMessage } from '@userspace-proxy/core/diagnostics';
import {
  createServiceInfo,
  createSocketContext,
  splitHostPort,
} from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import { startTcpServer, type TcpTestServer } from '../../core/src/test-support/echo-servers.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { type NativeTcpFactory, withNativeTcp } from './index.js';
import { FIRST_RING } from './picks-ahead.js';
import type { NativeTcpProxySocket } from './proxy-socket-native.js';
import { PICK_RING } from './relay-protocol.js';
import {
  HAS_CC,
  helloThrough,
  picksSettled,
  proxyInTest,
  randomLoopback,
  useCleanup,
} from './test-support/native-tests.js';

// The fast path: endpoints picked ahead by core's round-robin balancer, dialled by the helper the
// moment it accepts, with no dial asked of Node per connection.
const cleanup = useCleanup();

const servicePort = { namespace: 'ns', name: 'web', port: 'http', protocol: 'TCP' as const };

async function backend(): Promise<TcpTestServer> {
  const s = await startTcpServer({ host: randomLoopback() });
  cleanup.push(() => s.close());
  return s;
}

function endpointsOf(list: string[]): Endpoints {
  return {
    metadata: { namespace: 'ns', name: 'web' },
    subsets: list.map((hostPort) => {
      const { host, port } = splitHostPort(hostPort) ?? { host: hostPort, port: 0 };
      return { addresses: [{ ip: host }], ports: [{ name: 'http', port }] };
    }),
  };
}

async function setup(first: string[], affinity: 'None' | 'ClientIP' = 'None', late = false) {
  const lb = new RoundRobinLoadBalancer({ outlierEjection: { consecutiveFailures: 0 } });
  const drawn = { picks: 0 };
  const next = lb.nextEndpoint.bind(lb);
  lb.nextEndpoint = (...args) => {
    drawn.picks++;
    return next(...args);
  };
  let current = endpointsOf(first);
  const learn = (): void => {
    lb.newService(servicePort, affinity, 0);
    lb.onEndpointsAdd(current);
  };
  if (!late) learn();
  const f: NativeTcpFactory = withNativeTcp(createProxySocketFactory(), { threads: 2 });
  cleanup.push(() => f.close());
  const ctx = createSocketContext({
    loadBalancer: lb,
    protocol: 'TCP',
    ip: randomLoopback(),
    servicePort,
  });
  const socket = (await f(ctx)) as NativeTcpProxySocket;
  proxyInTest(socket, ctx, createServiceInfo(ctx, { sessionAffinityType: affinity }), cleanup);
  /** Every helper thread holds the current picks. */
  const settled = (): boolean => picksSettled(socket);
  const change = async (list: string[]): Promise<void> => {
    const next = endpointsOf(list);
    lb.onEndpointsUpdate(current, next);
    current = next;
    ctx.notifyEndpointsChanged();
    await waitFor(settled, 5000);
  };
  const hello = (): Promise<string> => helloThrough(socket);
  return { f, socket, settled, change, hello, learn, drawn };
}

function recordOpens(): ConnectionOpenMessage[] {
  const seen: ConnectionOpenMessage[] = [];
  const fn = (m: unknown): void => {
    seen.push(m as ConnectionOpenMessage);
  };
  subscribe(CHANNELS.connectionOpen, fn);
  cleanup.push(async () => unsubscribe(CHANNELS.connectionOpen, fn));
  return seen;
}

describe.skipIf(!HAS_CC)('NativeTcpProxySocket picks ahead', () => {
  it('spreads connections round robin with no dial asked of Node per accept', async () => {
    const a = await backend();
    const b = await backend();
    const opens = recordOpens();
    const { f, settled, hello } = await setup([a.endpoint, b.endpoint]);
    await waitFor(settled, 5000);
    for (let i = 0; i < 40; i++) expect(await hello()).toBe('hi');
    // Their frames reach Node up to a millisecond late (the helper's lazy frames).
    await waitFor(() => f.counters.accepted === 40, 5000);
    expect(f.counters.dialsAsked).toBe(0);
    expect(f.counters.dialsAhead).toBe(40);
    expect(a.accepted + b.accepted).toBe(40);
    // Each helper thread takes alternating picks: the two endpoints differ by at most one per thread.
    expect(Math.abs(a.accepted - b.accepted)).toBeLessThanOrEqual(2);
    await waitFor(() => opens.length === 40, 5000);
    expect(new Set(opens.map((m) => m.endpoint))).toEqual(new Set([a.endpoint, b.endpoint]));
  });

  it('never dials an endpoint that left once the change reached the helper', async () => {
    const a = await backend();
    const b = await backend();
    const { change, hello } = await setup([a.endpoint, b.endpoint]);
    expect(await hello()).toBe('hi');
    await change([b.endpoint]);
    const before = a.accepted;
    for (let i = 0; i < 30; i++) expect(await hello()).toBe('hi');
    expect(a.accepted).toBe(before);
  });

  it('runs the rest of the dial schedule in Node when the first pick fails', async () => {
    const b = await backend();
    const dead = await backend();
    const deadEndpoint = dead.endpoint;
    await dead.close();
    const errors: string[] = [];
    const fn = (m: unknown): void => {
      errors.push((m as { endpoint: string }).endpoint);
    };
    subscribe(CHANNELS.dialError, fn);
    cleanup.push(async () => unsubscribe(CHANNELS.dialError, fn));
    const { f, settled, hello } = await setup([deadEndpoint, b.endpoint]);
    await waitFor(settled, 5000);
    for (let i = 0; i < 10; i++) expect(await hello()).toBe('hi');
    expect(b.accepted).toBe(10);
    expect(errors.length).toBeGreaterThan(0);
    expect(new Set(errors)).toEqual(new Set([deadEndpoint]));
    // Every failed first pick was retried by Node: one 'D' per failure.
    expect(f.counters.dialsAsked).toBe(errors.length);
  });

  it('tops a thread up when an accept finds its ring empty (the balancer learnt the Service after the socket opened)', async () => {
    const a = await backend();
    const { f, learn, hello } = await setup([a.endpoint], 'None', true);
    learn(); // as a Proxier does after opening the socket, with no endpoints change to report
    for (let i = 0; i < 20; i++) expect(await hello()).toBe('hi');
    expect(a.accepted).toBe(20);
    await waitFor(() => f.counters.accepted === 20, 5000);
    // The first accept of each thread (two threads) went the per-accept way and refilled its ring.
    expect(f.counters.dialsAsked).toBeLessThanOrEqual(2);
    expect(f.counters.dialsAhead).toBe(20 - f.counters.dialsAsked);
  });

  it('gives a listener that never accepts a small ring on each thread', async () => {
    const a = await backend();
    const b = await backend();
    const { socket, settled, drawn } = await setup([a.endpoint, b.endpoint]);
    await waitFor(settled, 5000);
    expect(socket.picksAhead()?.ring).toEqual([FIRST_RING, FIRST_RING]);
    // Two threads, a few picks each: not a full ring of PICK_RING per thread.
    expect(drawn.picks).toBe(2 * FIRST_RING);
  });

  it('grows a ring that a burst of accepts empties, up to PICK_RING', async () => {
    const a = await backend();
    const b = await backend();
    const { f, socket, settled, hello } = await setup([a.endpoint, b.endpoint]);
    await waitFor(settled, 5000);
    const burst = async (): Promise<void> => {
      const all = await Promise.all(Array.from({ length: 96 }, () => hello()));
      expect(all.every((r) => r === 'hi')).toBe(true);
    };
    await burst();
    const ring = socket.picksAhead()?.ring ?? [];
    expect(Math.max(...ring)).toBeGreaterThan(FIRST_RING);
    expect(Math.max(...ring)).toBeLessThanOrEqual(PICK_RING);
    expect(a.accepted + b.accepted).toBe(96);
    await waitFor(() => f.counters.accepted === 96, 5000);
    // The misses went the per-accept way, counted as asked dials; the rest were dialled ahead.
    expect(f.counters.dialsAhead + f.counters.dialsAsked).toBe(96);
    expect(f.counters.dialsAhead).toBeGreaterThan(0);
  });

  it('keeps session affinity on the per-accept path: sticky, no picks ahead', async () => {
    const a = await backend();
    const b = await backend();
    const { f, socket, hello } = await setup([a.endpoint, b.endpoint], 'ClientIP');
    expect(socket.picksAhead()).toBeUndefined();
    for (let i = 0; i < 10; i++) expect(await hello()).toBe('hi');
    expect(f.counters.dialsAhead).toBe(0);
    expect(f.counters.dialsAsked).toBe(10);
    expect([a.accepted, b.accepted].sort()).toEqual([0, 10]);
  });
});
