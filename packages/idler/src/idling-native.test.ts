import { spawnSync } from 'node:child_process';
import type net from 'node:net';
import {
  createProxySocketFactory,
  type ProxySocket,
  RoundRobinLoadBalancer,
} from '@userspace-proxy/core';
import { createServiceInfo, createSocketContext } from '@userspace-proxy/core/sockets';
import { type NativeTcpFactory, withNativeTcp } from '@userspace-proxy/native';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Idler } from './idler.js';
import { createIdlingProxySocketFactory } from './idling-socket-factory.js';
import type { IdlerOptions } from './options.js';
import {
  closed,
  connect,
  endpointsOf,
  firstBytes,
  RecordingRecorder,
  randomLoopback,
  tcpBackend,
} from './test-support/fakes.js';

// The idler's TCP path through @userspace-proxy/native (the `tcp` option): the helper holds the
// clients, the Idler's policy decides in Node, end to end on loopback.
const HAS_CC = spawnSync('cc', ['--version']).status === 0;

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

async function open(options: IdlerOptions = {}) {
  const recorder = new RecordingRecorder();
  const idler = new Idler({ recorder, ...options });
  cleanups.push(() => idler.close());
  const native: NativeTcpFactory = withNativeTcp(createProxySocketFactory(), {
    threads: 2,
    dialTimeoutsMs: [500],
  });
  cleanups.push(() => native.close());
  const factory = createIdlingProxySocketFactory({
    idler,
    tcp: (acceptPolicy) => native.withAcceptPolicy(acceptPolicy),
  });
  const lb = new RoundRobinLoadBalancer();
  const ip = randomLoopback();
  const servicePort = { namespace: 'ns', name: 'web', port: 'p', protocol: 'TCP' as const };
  const context = createSocketContext({ loadBalancer: lb, protocol: 'TCP', ip, servicePort });
  const socket: ProxySocket = await factory(context);
  void socket.proxyLoop(createServiceInfo(context));
  cleanups.push(() => socket.close());
  const publish = (port: number) => {
    lb.onEndpointsAdd(endpointsOf('ns', 'web', [ip], port, 'p', 'TCP'));
    context.notifyEndpointsChanged();
  };
  const client = async (text?: string): Promise<net.Socket> => {
    const c = await connect(ip, socket.addr().port);
    cleanups.push(() => c.destroy());
    if (text !== undefined) c.write(text);
    return c;
  };
  return { idler, recorder, native, socket, ip, publish, client };
}

describe.skipIf(!HAS_CC)('the idler on the native socket', () => {
  it('holds in the helper, asks for pods, hands over, then proxies', async () => {
    const s = await open();
    const a = await s.client('a');
    await vi.waitFor(() => expect(s.idler.stats().heldNow).toBe(1));
    const b = await s.client('b');
    await vi.waitFor(() => expect(s.idler.stats().heldNow).toBe(2));
    expect(s.recorder.events.map((e) => e.reason)).toEqual(['NeedPods']);
    expect(s.native.counters.accepted).toBe(2);
    expect(s.native.counters.dialsAsked).toBe(0);
    const backend = await tcpBackend(s.ip);
    cleanups.push(() => backend.close());
    s.publish(backend.port);
    expect(await firstBytes(a, 4)).toBe('ok:a');
    expect(await firstBytes(b, 4)).toBe('ok:b');
    // Both dials start at once (oldest first): which reaches the backend first is the kernel's.
    expect([...backend.received].sort()).toEqual(['a', 'b']);
    expect(s.idler.stats()).toMatchObject({ handedOver: 2, handOverFailures: 0, heldNow: 0 });
    const late = await s.client('late');
    expect(await firstBytes(late, 7)).toBe('ok:late');
    expect(s.idler.stats().handedOver).toBe(2);
  });

  it('times a held client out (RST: it sent a request), and evicts the oldest beyond the bound', async () => {
    const s = await open({ holdTimeoutMs: 300, maxHeldPerServicePort: 2 });
    const first = await s.client('1');
    const firstClosed = closed(first);
    await vi.waitFor(() => expect(s.idler.stats().heldNow).toBe(1));
    await s.client('2');
    await vi.waitFor(() => expect(s.idler.stats().heldNow).toBe(2));
    await s.client('3');
    await firstClosed;
    await vi.waitFor(() => expect(s.idler.stats().evictions).toBe(1));
    await vi.waitFor(() => expect(s.idler.stats().timeouts).toBe(2), { timeout: 5_000 });
    expect(s.idler.stats().heldNow).toBe(0);
    await vi.waitFor(() => expect(s.socket.activeConnections?.()).toBe(0));
  });

  it('drops a client that goes away while held at once, and a failed hand-over closes it only', async () => {
    const s = await open();
    const gone = await s.client();
    await vi.waitFor(() => expect(s.idler.stats().heldNow).toBe(1));
    gone.destroy();
    await vi.waitFor(() => expect(s.idler.stats().clientsClosed).toBe(1));
    const c = await s.client('x');
    await vi.waitFor(() => expect(s.idler.stats().heldNow).toBe(1));
    const backend = await tcpBackend(s.ip);
    const port = backend.port;
    await backend.close(); // nobody listens there now: the hand-over's dial is refused
    s.publish(port);
    await closed(c);
    await vi.waitFor(() => expect(s.idler.stats().handOverFailures).toBe(1));
    await vi.waitFor(() => expect(s.socket.activeConnections?.()).toBe(0));
  });
});
