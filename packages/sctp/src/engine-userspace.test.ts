import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { createUserspaceSctpEngine, type SctpAssociation, type SctpEngine } from './index.js';
import { closed, collect, randomLoopback, randomPort, sendAll } from './test-support/loopback.js';

const engines: SctpEngine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.close();
});

function engine(): SctpEngine {
  const e = createUserspaceSctpEngine({ association: { rtoInitial: 200, rtoMin: 100 } });
  engines.push(e);
  return e;
}

async function pair(): Promise<{ client: SctpAssociation; server: SctpAssociation }> {
  const address = randomLoopback();
  const encapsulationPort = randomPort();
  const listener = await engine().listen({ address, port: 5000, encapsulationPort });
  const accepted = new Promise<SctpAssociation>((resolve) => listener.once('association', resolve));
  const client = await engine().connect({
    address,
    port: 5000,
    encapsulationPort,
    localAddress: '127.0.0.1',
  });
  return { client, server: await accepted };
}

describe('userspace engine over UDP loopback', () => {
  it('connects, relays messages with stream, PPID and U bit, and shuts down gracefully', async () => {
    const { client, server } = await pair();
    expect(client.state).toBe('established');
    const got = collect(server);
    client.send({ streamId: 1, ppid: 51, data: Buffer.from('hello') });
    client.send({ streamId: 2, ppid: 52, unordered: true, data: Buffer.from('world') });
    await waitFor(() => got.length === 2);
    expect(got.map((m) => [m.streamId, m.ppid, m.unordered, m.data.toString()])).toEqual([
      [1, 51, false, 'hello'],
      [2, 52, true, 'world'],
    ]);
    const cc = closed(client);
    const sc = closed(server);
    client.shutdown();
    expect((await cc).reason).toBe('shutdown');
    expect((await sc).reason).toBe('shutdown');
  });

  it('moves many messages and large fragmented ones in order', async () => {
    const { client, server } = await pair();
    const got = collect(server);
    const msgs = Array.from({ length: 2000 }, (_, i) => ({
      streamId: i % 3,
      ppid: i,
      data: Buffer.alloc(100 + (i % 7) * 1000, i & 0xff),
    }));
    msgs.push({ streamId: 0, ppid: 99, data: Buffer.alloc(300_000, 7) });
    await sendAll(client, msgs);
    await waitFor(() => got.length === msgs.length, 15_000);
    for (let s = 0; s < 3; s++) {
      const want = msgs.filter((m) => m.streamId === s).map((m) => m.ppid);
      expect(got.filter((m) => m.streamId === s).map((m) => m.ppid)).toEqual(want);
    }
    expect(got.at(-1)?.data.length).toBe(300_000);
    server.shutdown();
    expect((await closed(client)).reason).toBe('shutdown');
  });

  it('serves many associations on one port and one UDP socket, told apart by tags', async () => {
    const address = randomLoopback();
    const encapsulationPort = randomPort();
    const listener = await engine().listen({ address, port: 5000, encapsulationPort });
    listener.on('association', (a) => a.on('message', (m) => a.send(m)));
    // One client engine: every association shares its one ephemeral UDP port.
    const e = engine();
    const clients = await Promise.all(
      Array.from({ length: 20 }, () =>
        e.connect({ address, port: 5000, encapsulationPort, localAddress: '127.0.0.1' }),
      ),
    );
    expect(new Set(clients.map((c) => c.localEncapsulationPort)).size).toBe(1);
    const got = clients.map(collect);
    for (const [i, c] of clients.entries()) c.send({ ppid: i, data: Buffer.from(`client ${i}`) });
    await waitFor(() => got.every((g) => g.length === 1), 5_000, 'every echo');
    for (const [i, g] of got.entries()) expect(g[0]?.data.toString()).toBe(`client ${i}`);
    expect(listener.associationCount).toBe(20);
  });

  it('fails fast connecting to a port nobody listens on, and refuses past maxAssociations', async () => {
    const address = randomLoopback();
    const encapsulationPort = randomPort();
    const listener = await engine().listen({
      address,
      port: 5000,
      encapsulationPort,
      maxAssociations: 1,
    });
    const start = performance.now();
    await expect(
      engine().connect({ address, port: 5999, encapsulationPort, localAddress: '127.0.0.1' }),
    ).rejects.toMatchObject({
      code: 'ERR_SCTP_CONNECT',
    });
    expect(performance.now() - start).toBeLessThan(1000);
    await engine().connect({ address, port: 5000, encapsulationPort, localAddress: '127.0.0.1' });
    await expect(
      engine().connect({ address, port: 5000, encapsulationPort, localAddress: '127.0.0.1' }),
    ).rejects.toMatchObject({
      code: 'ERR_SCTP_CONNECT',
    });
    expect(listener.associationCount).toBe(1);
    await expect(
      engine().listen({ address, port: 5000, encapsulationPort: randomPort() }),
    ).resolves.toBeDefined();
  });

  it('aborts an attempt through its signal', async () => {
    const ac = new AbortController();
    const p = engine().connect({
      address: randomLoopback(),
      port: 5000,
      encapsulationPort: randomPort(),
      signal: ac.signal,
      localAddress: '127.0.0.1',
    });
    ac.abort(new Error('gave up'));
    await expect(p).rejects.toThrow('gave up');
  });
});
