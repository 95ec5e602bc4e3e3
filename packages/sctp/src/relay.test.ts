import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { createUserspaceSctpEngine, type SctpAssociation, type SctpEngine } from './index.js';
import { relayAssociations } from './relay.js';
import { closed, collect, randomLoopback, randomPort, sendAll } from './test-support/loopback.js';

const engines: SctpEngine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.close();
});
function engine(receiveWindow = 64 * 1024): SctpEngine {
  const e = createUserspaceSctpEngine({
    association: { rtoInitial: 200, rtoMin: 100, receiveWindow, sendHighWaterMark: 64 * 1024 },
  });
  engines.push(e);
  return e;
}

/** client → [proxy listener | relay | proxy dialer] → server */
async function chain(): Promise<{
  client: SctpAssociation;
  server: SctpAssociation;
  relay: ReturnType<typeof relayAssociations>;
}> {
  const proxyAddress = randomLoopback();
  const serverAddress = randomLoopback();
  const proxyPort = randomPort();
  const serverPort = randomPort();
  const proxy = engine();
  const server = engine();
  const serverListener = await server.listen({
    address: serverAddress,
    port: 7000,
    encapsulationPort: serverPort,
  });
  const serverSide = new Promise<SctpAssociation>((r) => serverListener.once('association', r));
  const front = await proxy.listen({
    address: proxyAddress,
    port: 7000,
    encapsulationPort: proxyPort,
  });
  const relayed = new Promise<ReturnType<typeof relayAssociations>>((resolve) =>
    front.once('association', async (c) => {
      c.pause(); // hold what arrives until the endpoint side is up
      const e = await proxy.connect({
        address: serverAddress,
        port: 7000,
        encapsulationPort: serverPort,
      });
      const r = relayAssociations(c, e);
      c.resume();
      resolve(r);
    }),
  );
  const client = await engine().connect({
    address: proxyAddress,
    port: 7000,
    encapsulationPort: proxyPort,
  });
  return { client, server: await serverSide, relay: await relayed };
}

describe('relayAssociations', () => {
  it('keeps stream, PPID, U bit and boundaries both ways, with backpressure, and passes the shutdown on', async () => {
    const { client, server, relay } = await chain();
    const atServer = collect(server);
    const atClient = collect(client);
    const up = Array.from({ length: 400 }, (_, i) => ({
      streamId: i % 4,
      ppid: 1000 + i,
      unordered: i % 5 === 0,
      data: Buffer.alloc(1 + ((i * 977) % 20000), i),
    }));
    const down = Array.from({ length: 50 }, (_, i) => ({
      streamId: 1,
      ppid: i,
      data: Buffer.alloc(3000, i),
    }));
    await Promise.all([sendAll(client, up), sendAll(server, down)]);
    await waitFor(
      () => atServer.length === up.length && atClient.length === down.length,
      15_000,
      'relayed',
    );
    for (let s = 0; s < 4; s++) {
      const want = up
        .filter((m) => m.streamId === s && !m.unordered)
        .map((m) => [m.ppid, m.data.length]);
      expect(
        atServer
          .filter((m) => m.streamId === s && !m.unordered)
          .map((m) => [m.ppid, m.data.length]),
      ).toEqual(want);
    }
    expect(atServer.filter((m) => m.unordered).length).toBe(80);
    expect(atClient.map((m) => m.ppid)).toEqual(down.map((m) => m.ppid));
    expect(relay.counters.messagesToEndpoint).toBe(400);
    const sc = closed(server);
    client.shutdown();
    expect((await closed(client)).reason).toBe('shutdown');
    expect((await sc).reason).toBe('shutdown');
    expect((await relay.done).info.reason).toBe('shutdown');
  });

  it('aborts the client when the endpoint side aborts', async () => {
    const { client, server, relay } = await chain();
    server.abort('backend going away');
    const info = await closed(client);
    expect(info.reason).toBe('abort-remote');
    expect(info.detail).toContain('the other side closed: abort-remote');
    expect((await relay.done).closedFirst).toBe('endpoint');
  });
});
