import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { createUserspaceSctpEngine, type SctpEngine } from './index.js';
import { collect, randomLoopback, randomPort } from './test-support/loopback.js';

const engines: SctpEngine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.close();
});

function engine(): SctpEngine {
  const e = createUserspaceSctpEngine({ association: { rtoInitial: 200, rtoMin: 100 } });
  engines.push(e);
  return e;
}

// Connect, messages, large messages, shutdown, faults and crafted packets: engine-suite.test.ts.
describe('userspace engine over UDP loopback', () => {
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

  it('gives an association asking for it a connected UDP socket of its own', async () => {
    const address = randomLoopback();
    const encapsulationPort = randomPort();
    const listener = await engine().listen({ address, port: 5000, encapsulationPort });
    listener.on('association', (a) => a.on('message', (m) => a.send(m)));
    const e = engine();
    const target = { address, port: 5000, encapsulationPort, localAddress: '127.0.0.1' };
    const shared = await e.connect(target);
    const own = await Promise.all([
      e.connect({ ...target, connectedSocket: true }),
      e.connect({ ...target, connectedSocket: true }),
    ]);
    const ports = new Set([shared, ...own].map((c) => c.localEncapsulationPort));
    expect(ports.size).toBe(3);
    const got = own.map(collect);
    for (const [i, c] of own.entries())
      c.send({ ppid: i, data: Buffer.alloc(5000 + i, i), unordered: i === 1 });
    await waitFor(() => got.every((g) => g.length === 1), 5_000, 'every echo');
    for (const [i, g] of got.entries()) {
      expect(g[0]?.data.length).toBe(5000 + i);
      expect(g[0]?.ppid).toBe(i);
    }
    const closed = new Promise((r) => own[0]?.once('close', r));
    own[0]?.shutdown();
    await closed;
    expect(own[0]?.closeInfo?.reason).toBe('shutdown');
    await waitFor(() => listener.associationCount === 2, 5_000, 'the server side closed too');
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
    // The ABORT answers the INIT at once; without it the INIT would be retried for tens of seconds
    // (RTO from 1 s, doubling, 8 times), so 5 s tells them apart even on a loaded machine.
    expect(performance.now() - start).toBeLessThan(5000);
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
