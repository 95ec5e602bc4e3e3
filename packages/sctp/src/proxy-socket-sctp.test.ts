import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import {
  type Logger,
  type ProxySocket,
  type ProxySocketFactory,
  servicePortNameString,
} from '@userspace-proxy/core';
import { CHANNELS } from '@userspace-proxy/core/diagnostics';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { spyLogger } from '../../core/src/test-support/spy-logger.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import {
  createUserspaceSctpEngine,
  type SctpAssociation,
  type SctpAssociationOptions,
  type SctpEngine,
} from './index.js';
import { SCTP_PROXY_ASSOCIATION_DEFAULTS, withSctp } from './proxy-socket-sctp.js';
import { closed, collect, randomLoopback, randomPort, sendAll } from './test-support/loopback.js';

const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const FAST = { rtoInitial: 100, rtoMin: 100 };
const servicePort = { namespace: 'ns', name: 'diameter', port: 'sctp', protocol: 'SCTP' as const };
const key = servicePortNameString(servicePort);

function engine(): SctpEngine {
  const e = createUserspaceSctpEngine({ association: FAST });
  cleanup.push(() => e.close());
  return e;
}

/** An SCTP backend on its own loopback address that echoes, with its name as the first message's PPID... */
async function backend(
  name: number,
  encapsulationPort: number,
): Promise<{ endpoint: string; accepted: SctpAssociation[] }> {
  const address = randomLoopback();
  const accepted: SctpAssociation[] = [];
  const l = await engine().listen({ address, port: 3868, encapsulationPort });
  l.on('association', (a) => {
    accepted.push(a);
    // Echo with the stream, PPID and U bit; a message "who" is answered with the backend's name.
    a.on('message', (m) =>
      a.send(
        m.data.toString() === 'who'
          ? { streamId: m.streamId, ppid: name, data: Buffer.from(String(name)) }
          : m,
      ),
    );
  });
  return { endpoint: `${address}:3868`, accepted };
}

/**
 * The SCTP proxy socket on its own loopback address in front of `lb`. `ownEngine` lets the factory
 * make its engine (as the daemon's default does) instead of handing it one.
 */
async function proxy(
  lb: FakeLoadBalancer,
  endpointEncapsulationPort: number,
  extra: {
    maxAssociations?: number;
    logger?: Logger;
    ownEngine?: boolean;
    association?: SctpAssociationOptions;
  } = {},
) {
  const { logger, ownEngine, association, ...options } = extra;
  const ip = randomLoopback();
  const encapsulationPort = randomPort();
  const base: ProxySocketFactory = () => Promise.reject(new Error('base factory called'));
  const factory = withSctp(base, {
    ...(ownEngine ? {} : { engine: engine() }),
    encapsulationPort,
    endpointEncapsulationPort,
    association: { ...FAST, ...association },
    ...options,
  });
  const ctx = createSocketContext({
    loadBalancer: lb,
    protocol: 'SCTP',
    ip,
    port: 3868,
    servicePort,
    ...(logger ? { logger } : {}),
  });
  const socket: ProxySocket = await factory(ctx);
  const loop = socket.proxyLoop(fakeServiceInfo({ protocol: 'SCTP' }));
  cleanup.push(async () => {
    ctx.abort();
    await socket.close();
    await loop;
  });
  const connect = () =>
    engine().connect({ address: ip, port: 3868, encapsulationPort, localAddress: '127.0.0.1' });
  return { socket, connect, ip };
}

describe('SctpProxySocket', () => {
  it('relays each message with its stream, PPID and U bit through an endpoint, and shuts down end to end', async () => {
    const ep = randomPort();
    const b = await backend(1, ep);
    const { socket, connect } = await proxy(new FakeLoadBalancer({ [key]: [b.endpoint] }), ep);
    expect(socket.addr().port).toBe(3868);
    const client = await connect();
    const got = collect(client);
    const msgs = Array.from({ length: 200 }, (_, i) => ({
      streamId: i % 4,
      ppid: 100 + i,
      unordered: i % 7 === 0,
      data: Buffer.alloc(1 + ((i * 1237) % 9000), i),
    }));
    await sendAll(client, msgs);
    await waitFor(() => got.length === msgs.length, 10_000, 'echoes through the proxy');
    for (let s = 0; s < 4; s++) {
      const want = msgs
        .filter((m) => m.streamId === s && !m.unordered)
        .map((m) => [m.ppid, m.data.length]);
      expect(
        got.filter((m) => m.streamId === s && !m.unordered).map((m) => [m.ppid, m.data.length]),
      ).toEqual(want);
    }
    expect(
      got
        .filter((m) => m.unordered)
        .map((m) => m.ppid)
        .sort(),
    ).toEqual(
      msgs
        .filter((m) => m.unordered)
        .map((m) => m.ppid)
        .sort(),
    );
    expect(socket.activeConnections?.()).toBe(1);
    const backendSide = b.accepted[0] as SctpAssociation;
    const bc = closed(backendSide);
    const seen: Array<{ service: string; endpoint: string; bytesIn: number; bytesOut: number }> =
      [];
    const onClose = (m: unknown): void => {
      seen.push(m as (typeof seen)[number]);
    };
    subscribe(CHANNELS.connectionClose, onClose);
    try {
      client.shutdown();
      expect((await closed(client)).reason).toBe('shutdown');
      expect((await bc).reason).toBe('shutdown');
      await waitFor(() => socket.activeConnections?.() === 0, 5_000, 'relay gone');
      const bytes = msgs.reduce((n, m) => n + m.data.length, 0);
      await waitFor(() => seen.length === 1, 5_000, 'connectionClose published');
      expect(seen[0]).toMatchObject({
        service: key,
        endpoint: b.endpoint,
        bytesIn: bytes,
        bytesOut: bytes,
      });
    } finally {
      unsubscribe(CHANNELS.connectionClose, onClose);
    }
  });

  it('keeps a client on its endpoint (ClientIP affinity) and moves it off a dead one, resetting affinity', async () => {
    const ep = randomPort();
    const b1 = await backend(1, ep);
    const b2 = await backend(2, ep);
    const dead = `${randomLoopback()}:3868`; // nobody listens: the INIT is answered by nothing
    const lb = new FakeLoadBalancer(
      { [key]: [dead, b1.endpoint, b2.endpoint] },
      { affinity: true },
    );
    const { connect } = await proxy(lb, ep);
    const who = async (): Promise<number> => {
      const c = await connect();
      const got = collect(c);
      c.send({ data: Buffer.from('who') });
      await waitFor(() => got.length === 1, 10_000, 'answer');
      c.abort('done');
      return got[0]?.ppid as number;
    };
    const first = await who();
    expect(first).toBe(1);
    expect(lb.calls[0]?.result).toBe(dead);
    expect(lb.calls[1]).toMatchObject({ result: b1.endpoint, sessionAffinityReset: true });
    expect(await who()).toBe(1); // the same client address sticks to its endpoint
  });

  it('aborts the client when there is no endpoint, when the endpoint aborts, and past maxAssociations', async () => {
    const ep = randomPort();
    const b = await backend(1, ep);
    const lb = new FakeLoadBalancer({ [key]: [] });
    const { connect } = await proxy(lb, ep, { maxAssociations: 1 });
    // Refused while its COOKIE ECHO is handled: the ABORT reaches the client before COOKIE ACK.
    await expect(connect()).rejects.toMatchObject({
      code: 'ERR_SCTP_CONNECT',
      message: expect.stringContaining('missing endpoints'),
    });

    lb.setEndpoints(key, [b.endpoint]);
    const client = await connect();
    await waitFor(() => b.accepted.length === 1, 5_000, 'endpoint association');
    // The listener's own limit answers with an Out of Resource ABORT (cause 4).
    await expect(connect()).rejects.toMatchObject({ message: expect.stringContaining('cause 4') });
    (b.accepted[0] as SctpAssociation).abort('backend restarting');
    const gone = await closed(client);
    expect(gone.reason).toBe('abort-remote');
  });

  it("keeps open relays across endpoint changes and its own close, and drains on the client's shutdown", async () => {
    const ep = randomPort();
    const b1 = await backend(1, ep);
    const b2 = await backend(2, ep);
    const lb = new FakeLoadBalancer({ [key]: [b1.endpoint] });
    const { socket, connect } = await proxy(lb, ep);
    const client = await connect();
    const got = collect(client);
    const ask = async (n: number): Promise<number> => {
      client.send({ data: Buffer.from('who') });
      await waitFor(() => got.length === n, 10_000, 'answer');
      return got[n - 1]?.ppid as number;
    };
    expect(await ask(1)).toBe(1);
    // The Service moves to another endpoint: the open relay stays on its own, new clients move.
    lb.setEndpoints(key, [b2.endpoint]);
    expect(await ask(2)).toBe(1);
    const other = await connect();
    const otherGot = collect(other);
    other.send({ data: Buffer.from('who') });
    await waitFor(() => otherGot.length === 1, 10_000, 'the new client is answered');
    expect(otherGot[0]?.ppid).toBe(2);
    other.abort('done');
    // Closing the socket stops accepting; what is open carries on until it ends.
    await socket.close();
    await expect(connect()).rejects.toMatchObject({ code: 'ERR_SCTP_CONNECT' });
    expect(await ask(3)).toBe(1);
    let idle = false;
    expect(socket.idle).toBeDefined();
    void socket.idle?.().then(() => {
      idle = true;
    });
    client.shutdown();
    expect((await closed(client)).reason).toBe('shutdown');
    expect((await closed(b1.accepted[0] as SctpAssociation)).reason).toBe('shutdown');
    await waitFor(() => idle, 5_000, 'socket idle');
  });

  it('aborts what it relays on abortConnections (the drain deadline), both sides', async () => {
    const ep = randomPort();
    const b1 = await backend(1, ep);
    const lb = new FakeLoadBalancer({ [key]: [b1.endpoint] });
    const { socket, connect } = await proxy(lb, ep);
    const client = await connect();
    const got = collect(client);
    client.send({ data: Buffer.from('who') });
    await waitFor(() => got.length === 1, 10_000, 'answer');
    expect(socket.activeConnections?.()).toBe(1);
    socket.abortConnections?.();
    // Each side hears an ABORT from its peer: the client from the proxy, the endpoint from the relay.
    expect((await closed(client)).reason).toBe('abort-remote');
    expect((await closed(b1.accepted[0] as SctpAssociation)).reason).toBe('abort-remote');
    await waitFor(() => socket.activeConnections?.() === 0, 5_000, 'no relay left');
  });

  it('logs the warnings of an engine it makes itself, at most one a second', async () => {
    const ep = randomPort();
    const b = await backend(1, ep);
    const logger = spyLogger();
    const { connect } = await proxy(new FakeLoadBalancer({ [key]: [b.endpoint] }), ep, {
      maxAssociations: 1,
      logger,
      ownEngine: true,
    });
    await connect();
    // Past the listener's limit: the endpoint refuses and warns, once for both within the second.
    await expect(connect()).rejects.toMatchObject({ code: 'ERR_SCTP_CONNECT' });
    await expect(connect()).rejects.toMatchObject({ code: 'ERR_SCTP_CONNECT' });
    expect(logger.warn).toHaveBeenCalledTimes(1);
    expect(String(logger.warn.mock.calls[0]?.[0])).toContain('refused: 1 associations');
  });

  it('advertises a 1 MiB window to clients by default (a 256 KiB one ran dry under load), or the one asked for', async () => {
    const peerWindow = (a: SctpAssociation): number =>
      (a as unknown as { sender: { peerRwnd: number } }).sender.peerRwnd;
    expect(SCTP_PROXY_ASSOCIATION_DEFAULTS).toMatchObject({
      receiveWindow: 1 << 20,
      sendHighWaterMark: 1 << 20,
      maxMessageBytes: 256 * 1024,
    });
    const ep = randomPort();
    const b = await backend(1, ep);
    const lb = () => new FakeLoadBalancer({ [key]: [b.endpoint] });
    const byDefault = await (await proxy(lb(), ep)).connect();
    expect(peerWindow(byDefault)).toBe(1 << 20);
    const asked = await (
      await proxy(lb(), ep, { association: { receiveWindow: 64 * 1024 } })
    ).connect();
    expect(peerWindow(asked)).toBe(64 * 1024);
    byDefault.abort();
    asked.abort();
  });

  it('hands every other protocol to the base factory', async () => {
    let asked = '';
    const base: ProxySocketFactory = (ctx) => {
      asked = ctx.protocol;
      return Promise.reject(new Error('base'));
    };
    const factory = withSctp(base);
    const ctx = createSocketContext({ loadBalancer: new FakeLoadBalancer(), protocol: 'TCP' });
    await expect(factory(ctx)).rejects.toThrow('base');
    expect(asked).toBe('TCP');
  });
});
