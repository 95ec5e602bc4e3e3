import dgram from 'node:dgram';
import {
  createLogger,
  type EndpointSlice,
  newCustomProxier,
  newProxier,
  type Proxier,
  type Service,
} from '@userspace-proxy/core';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { HybridProxier } from './hybrid-proxier.js';
import { Idler } from './idler.js';
import { IDLED_AT_ANNOTATION } from './idling-predicates.js';
import { createIdlingProxySocketFactory } from './idling-socket-factory.js';
import {
  closed,
  connect,
  firstBytes,
  RecordingConntrack,
  RecordingRecorder,
  randomLoopback,
  tcpBackend,
  udpBackend,
} from './test-support/fakes.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

const TCP = { namespace: 'ns', name: 'web', port: 'http', protocol: 'TCP' as const };
const UDP = { namespace: 'ns', name: 'web', port: 'dns', protocol: 'UDP' as const };

function service(ip: string, idled: boolean): Service {
  return {
    metadata: {
      namespace: 'ns',
      name: 'web',
      ...(idled ? { annotations: { [IDLED_AT_ANNOTATION]: '2026-12-01T09:00:00Z' } } : {}),
    },
    spec: {
      clusterIP: ip,
      ports: [
        { name: 'http', port: 8080, protocol: 'TCP' },
        { name: 'dns', port: 5353, protocol: 'UDP' },
      ],
    },
  };
}

function slice(ip: string | undefined, tcpPort = 1, udpPort = 1): EndpointSlice {
  return {
    metadata: { namespace: 'ns', name: 'web-1', labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv4',
    endpoints: ip === undefined ? [] : [{ addresses: [ip], conditions: { ready: true } }],
    ports: [
      { name: 'http', port: tcpPort, protocol: 'TCP' },
      { name: 'dns', port: udpPort, protocol: 'UDP' },
    ],
  };
}

async function start(idlerOptions: ConstructorParameters<typeof Idler>[0] = {}) {
  const recorder = new RecordingRecorder();
  const conntrack = new RecordingConntrack();
  const idler = new Idler({ recorder, ...idlerOptions });
  const logger = process.env.IDLER_DEBUG ? createLogger({ minLevel: 2 }) : undefined;
  const options = {
    minSyncPeriodMs: 5,
    syncPeriodMs: 1000,
    nodePortAddresses: [],
    ...(logger ? { logger } : {}),
  };
  const main: Proxier = await newProxier(options);
  const idling: Proxier = await newCustomProxier(
    options,
    createIdlingProxySocketFactory({ idler, dialTimeoutsMs: [500] }),
  );
  const hybrid = new HybridProxier({ main, idling, idler, conntrack });
  const stop = new AbortController();
  const loop = hybrid.syncLoop(stop.signal);
  cleanups.push(async () => {
    stop.abort();
    await loop;
    await hybrid.shutdown();
    idler.close();
  });
  hybrid.onServiceSynced();
  hybrid.onEndpointSlicesSynced();
  return { recorder, conntrack, idler, main, idling, hybrid };
}

/** Starts with the Service idled (no endpoints) and one client held with `request` sent. */
async function startHolding(request: string) {
  const h = await start();
  const ip = randomLoopback();
  h.hybrid.onEndpointSliceAdd(slice(undefined));
  h.hybrid.onServiceAdd(service(ip, true));
  await vi.waitFor(() => expect(h.idling.getServiceInfo(TCP)).toBeDefined());
  const client = await connect(ip, 8080);
  cleanups.push(() => client.destroy());
  client.write(request);
  await vi.waitFor(() => expect(h.idler.stats().heldNow).toBe(1));
  return { ...h, ip, client };
}

describe('HybridProxier', () => {
  it('moves a Service to the idler and back with a live UDP flow, handing the held client over', async () => {
    const h = await start();
    const ip = randomLoopback();
    h.hybrid.onServiceAdd(service(ip, true));
    await vi.waitFor(() => expect(h.main.getServiceInfo(TCP)).toBeDefined());
    expect(h.hybrid.isIdled('ns', 'web')).toBe(false);

    // The Service's endpoints are empty and it carries idled-at: the idling proxier takes it.
    h.hybrid.onEndpointSliceAdd(slice(undefined));
    expect(h.hybrid.isIdled('ns', 'web')).toBe(true);
    await vi.waitFor(() => {
      expect(h.idling.getServiceInfo(TCP)).toBeDefined();
      expect(h.idling.getServiceInfo(UDP)).toBeDefined();
      expect(h.main.getServiceInfo(TCP)).toBeUndefined();
      expect(h.conntrack.cleared).toEqual([{ ip, protocol: 'UDP' }]);
    });

    // A live UDP flow and a held TCP client.
    const udp = dgram.createSocket('udp4');
    const replies: string[] = [];
    udp.on('message', (m) => replies.push(m.toString()));
    await new Promise<void>((resolve) => udp.bind(0, '127.0.0.1', resolve));
    cleanups.push(() => udp.close());
    const flow = setInterval(() => udp.send('ping', 5353, ip), 20);
    cleanups.push(() => clearInterval(flow));
    const client = await connect(ip, 8080);
    cleanups.push(() => client.destroy());
    client.write('hello');
    await vi.waitFor(() => expect(h.idler.stats().heldNow).toBe(1));
    await vi.waitFor(() => expect(h.idler.stats().udpDropped).toBeGreaterThan(0));
    expect(h.recorder.events.map((e) => e.reason)).toContain('NeedPods');

    // Pods come: the held client is handed over, the Service moves to main, conntrack is cleared.
    const backendIP = randomLoopback();
    const tcp = await tcpBackend(backendIP);
    cleanups.push(() => tcp.close());
    const dns = await udpBackend(backendIP);
    cleanups.push(() => dns.close());
    h.hybrid.onEndpointSliceUpdate(slice(undefined), slice(backendIP, tcp.port, dns.port));
    expect(h.hybrid.isIdled('ns', 'web')).toBe(false);
    expect(await firstBytes(client, 'ok:hello'.length)).toBe('ok:hello');
    await vi.waitFor(() => {
      expect(h.main.getServiceInfo(TCP)).toBeDefined();
      expect(h.main.getServiceInfo(UDP)).toBeDefined();
      expect(h.conntrack.cleared).toHaveLength(2);
    });
    await vi.waitFor(() => expect(replies).toContain('ok:ping'));
    const later = await connect(ip, 8080);
    cleanups.push(() => later.destroy());
    later.write('again');
    expect(await firstBytes(later, 'ok:again'.length)).toBe('ok:again');
    expect(h.idler.stats()).toMatchObject({ handedOver: 1, handOverFailures: 0 });

    // Scaled to zero again: back to the idler, conntrack cleared once more.
    h.hybrid.onEndpointSliceUpdate(slice(backendIP, tcp.port, dns.port), slice(undefined));
    expect(h.hybrid.isIdled('ns', 'web')).toBe(true);
    await vi.waitFor(() => {
      expect(h.idling.getServiceInfo(TCP)).toBeDefined();
      expect(h.conntrack.cleared).toHaveLength(3);
    });
  });

  it('keeps forwarding endpoints to the idler while it holds clients after the switch (vector 6, fixed)', async () => {
    const h = await start();
    const ip = randomLoopback();
    h.hybrid.onEndpointSliceAdd(slice(undefined));
    h.hybrid.onServiceAdd(service(ip, true));
    expect(h.hybrid.isIdled('ns', 'web')).toBe(true);
    await vi.waitFor(() => expect(h.idling.getServiceInfo(TCP)).toBeDefined());
    const client = await connect(ip, 8080);
    cleanups.push(() => client.destroy());
    client.write('late');
    await vi.waitFor(() => expect(h.idler.stats().heldNow).toBe(1));
    // The annotation goes first (the unidling controller), pods come later.
    h.hybrid.onServiceUpdate(service(ip, true), service(ip, false));
    expect(h.hybrid.isIdled('ns', 'web')).toBe(false);
    await vi.waitFor(() => expect(h.main.getServiceInfo(TCP)).toBeDefined());
    expect(h.idler.holds('ns', 'web')).toBe(true);
    const backendIP = randomLoopback();
    const tcp = await tcpBackend(backendIP);
    cleanups.push(() => tcp.close());
    h.hybrid.onEndpointSliceUpdate(slice(undefined), slice(backendIP, tcp.port));
    expect(await firstBytes(client, 'ok:late'.length)).toBe('ok:late');
  });

  it('refuses the held clients of a deleted Service at once, and of a removed port on an update', async () => {
    const h = await startHolding('x');
    const { ip, client: first } = h;
    // The TCP port goes from the Service (the UDP one stays): its held client is refused.
    const udpOnly = service(ip, true);
    udpOnly.spec.ports = (udpOnly.spec.ports ?? []).filter((p) => p.protocol === 'UDP');
    h.hybrid.onServiceUpdate(service(ip, true), udpOnly);
    expect(await closed(first)).toBe('');
    expect(h.idler.stats()).toMatchObject({ heldNow: 0, released: 1 });
    // Back with its TCP port; then deleted while a client is held.
    h.hybrid.onServiceUpdate(udpOnly, service(ip, true));
    await vi.waitFor(() => expect(h.idling.getServiceInfo(TCP)).toBeDefined());
    const second = await connect(ip, 8080);
    second.write('y');
    await vi.waitFor(() => expect(h.idler.stats().heldNow).toBe(1));
    h.hybrid.onServiceDelete(service(ip, true));
    expect(await closed(second)).toBe('');
    expect(h.idler.stats()).toMatchObject({ heldNow: 0, released: 2 });
    expect(h.idler.holds('ns', 'web')).toBe(false);
  });

  it('a drain refuses held clients at once instead of waiting out its deadline with them', async () => {
    const h = await startHolding('waiting');
    const { client } = h;
    const errors: string[] = [];
    client.on('error', (e: NodeJS.ErrnoException) => errors.push(e.code ?? ''));
    const result = await h.hybrid.drain(60_000);
    expect(result).toEqual({ remaining: 0, timedOut: false });
    await closed(client);
    // It had sent a request: a reset, so it does not take the close for an answer.
    expect(errors).toEqual(['ECONNRESET']);
    // Not handed to the stopping proxier, even if pods come now.
    h.hybrid.onEndpointSliceUpdate(slice(undefined), slice('127.0.0.1', 9, 9));
    expect(h.idler.stats()).toMatchObject({ handedOver: 0, heldNow: 0 });
  });

  it('opt-in UDP buffer: at the switch to main the buffered datagrams are dropped and counted, not replayed into the closing socket', async () => {
    const h = await start({ udpBufferDatagrams: 4 });
    const ip = randomLoopback();
    h.hybrid.onEndpointSliceAdd(slice(undefined));
    h.hybrid.onServiceAdd(service(ip, true));
    await vi.waitFor(() => expect(h.idling.getServiceInfo(UDP)).toBeDefined());
    const udp = dgram.createSocket('udp4');
    const replies: string[] = [];
    udp.on('message', (m) => replies.push(m.toString()));
    await new Promise<void>((resolve) => udp.bind(0, '127.0.0.1', resolve));
    cleanups.push(() => udp.close());
    for (const d of ['q1', 'q2', 'q3']) udp.send(d, 5353, ip);
    await vi.waitFor(() => expect(h.idler.stats().udpBuffered).toBe(3));
    const backendIP = randomLoopback();
    const dns = await udpBackend(backendIP);
    cleanups.push(() => dns.close());
    h.hybrid.onEndpointSliceUpdate(slice(undefined), slice(backendIP, 1, dns.port));
    // A replay would go through the idling socket, which the switch closes at once with its
    // sessions: nothing would reach the backend (seen before this fix), so none is claimed.
    expect(h.idler.stats()).toMatchObject({ udpReplayed: 0, udpDropped: 3 });
    // The client's retransmission is served by the main proxier.
    await vi.waitFor(() => expect(h.main.getServiceInfo(UDP)).toBeDefined());
    const retry = setInterval(() => udp.send('q1', 5353, ip), 20);
    cleanups.push(() => clearInterval(retry));
    await vi.waitFor(() => expect(replies).toContain('ok:q1'));
  });
});
