/**
 * Loss, reordering, duplication and corruption through an in-process UDP relay: every message must
 * arrive exactly once, in order per stream (unordered ones exactly once), and the shutdown must
 * complete; or, where the path is cut, the association must report failure in bounded time.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { ChunkType } from './chunk-types.js';
import {
  createUserspaceSctpEngine,
  type SctpAssociation,
  type SctpAssociationOptions,
  type SctpEngine,
} from './index.js';
import { closed, randomLoopback, randomPort, sendAll } from './test-support/loopback.js';
import { prng } from './test-support/prng.js';
import { type Relay, type RelayPolicy, startRelay } from './test-support/udp-relay.js';

const FAST: SctpAssociationOptions = {
  rtoInitial: 100,
  rtoMin: 50,
  rtoMax: 400,
  sackDelay: 20,
  maxRetransmits: 12,
};

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function setup(
  policy: RelayPolicy,
  opts: SctpAssociationOptions = FAST,
): Promise<{
  relay: Relay;
  connect: () => Promise<SctpAssociation>;
  accepted: Promise<SctpAssociation>;
}> {
  const address = randomLoopback();
  const encapsulationPort = randomPort();
  const serverEngine: SctpEngine = createUserspaceSctpEngine({ association: opts });
  const clientEngine: SctpEngine = createUserspaceSctpEngine({ association: opts });
  cleanup.push(
    () => serverEngine.close(),
    () => clientEngine.close(),
  );
  const listener = await serverEngine.listen({ address, port: 6000, encapsulationPort });
  const accepted = new Promise<SctpAssociation>((resolve) => listener.once('association', resolve));
  const relay = await startRelay(address, address, encapsulationPort, policy);
  cleanup.push(() => relay.close());
  const connect = (): Promise<SctpAssociation> =>
    clientEngine.connect({
      address,
      port: 6000,
      encapsulationPort: relay.port,
      localAddress: address,
    });
  return { relay, connect, accepted };
}

/** Drops the first datagram of `dir` that carries chunk `type`. */
function dropFirst(dir: 'c2s' | 's2c', type: number): RelayPolicy {
  let done = false;
  return (d, types) => {
    if (!done && d === dir && types.includes(type)) {
      done = true;
      return { drop: true };
    }
    return undefined;
  };
}

interface Tagged {
  streamId: number;
  unordered: boolean;
  id: number;
}

/** Messages both ways, then a graceful shutdown; checks exactly-once and per-stream order. */
async function exchange(policy: RelayPolicy, seed = 1, count = 200): Promise<Relay> {
  const { relay, connect, accepted } = await setup(policy);
  const client = await connect();
  const server = await accepted;
  const rand = prng(seed);
  const make = (n: number): Array<Tagged & { data: Buffer }> =>
    Array.from({ length: n }, (_, id) => {
      const size = rand() < 0.1 ? 1500 + Math.floor(rand() * 6000) : 8 + Math.floor(rand() * 400);
      const data = Buffer.alloc(size, id & 0xff);
      data.writeUInt32BE(id, 0);
      data.writeUInt32BE(size, 4);
      return { streamId: id % 4, unordered: rand() < 0.2, id, data };
    });
  const up = make(count);
  const down = make(Math.floor(count / 4));
  const gotUp: Tagged[] = [];
  const gotDown: Tagged[] = [];
  const check = (list: Tagged[]) => (m: { streamId: number; unordered: boolean; data: Buffer }) => {
    expect(m.data.length).toBe(m.data.readUInt32BE(4));
    list.push({ streamId: m.streamId, unordered: m.unordered, id: m.data.readUInt32BE(0) });
  };
  server.on('message', check(gotUp));
  client.on('message', check(gotDown));
  await Promise.all([sendAll(client, up), sendAll(server, down)]);
  await waitFor(
    () => gotUp.length >= up.length && gotDown.length >= down.length,
    30_000,
    'all messages',
  );
  for (const [sent, got] of [
    [up, gotUp],
    [down, gotDown],
  ] as const) {
    expect(got.map((m) => m.id).sort((a, b) => a - b)).toEqual(sent.map((m) => m.id));
    for (let s = 0; s < 4; s++) {
      const ordered = (l: readonly Tagged[]) =>
        l.filter((m) => m.streamId === s && !m.unordered).map((m) => m.id);
      expect(ordered(got)).toEqual(ordered(sent));
    }
    for (const m of got) expect(m.unordered).toBe(sent[m.id]?.unordered);
  }
  const cc = closed(client);
  const sc = closed(server);
  client.shutdown();
  expect((await cc).reason).toBe('shutdown');
  expect((await sc).reason).toBe('shutdown');
  return relay;
}

describe('fault injection through a UDP relay', () => {
  const drops: Array<[string, 'c2s' | 's2c', number]> = [
    ['INIT', 'c2s', ChunkType.INIT],
    ['INIT ACK', 's2c', ChunkType.INIT_ACK],
    ['COOKIE ECHO', 'c2s', ChunkType.COOKIE_ECHO],
    ['COOKIE ACK', 's2c', ChunkType.COOKIE_ACK],
    ['the first DATA', 'c2s', ChunkType.DATA],
    ['the first DATA from the server', 's2c', ChunkType.DATA],
    ['a SACK', 's2c', ChunkType.SACK],
    ['SHUTDOWN', 'c2s', ChunkType.SHUTDOWN],
    ['SHUTDOWN ACK', 's2c', ChunkType.SHUTDOWN_ACK],
    // The client is gone by then: its lingering socket answers the retransmitted SHUTDOWN ACK (§8.4).
    ['SHUTDOWN COMPLETE', 'c2s', ChunkType.SHUTDOWN_COMPLETE],
  ];
  for (const [name, dir, type] of drops) {
    it(`recovers when ${name} is dropped`, async () => {
      const relay = await exchange(dropFirst(dir, type), 7, 60);
      expect(relay.stats.dropped).toBe(1);
    });
  }

  for (const loss of [0.01, 0.05]) {
    it(`delivers everything exactly once, in order, under ${loss * 100} % seeded random loss`, async () => {
      const rand = prng(loss === 0.01 ? 101 : 105);
      const relay = await exchange(() => (rand() < loss ? { drop: true } : undefined), 3, 300);
      expect(relay.stats.dropped).toBeGreaterThan(0);
    });
  }

  it('survives reordering, duplication and corruption together with 2 % loss', async () => {
    const rand = prng(77);
    const relay = await exchange(
      () => {
        const r = rand();
        if (r < 0.02) return { drop: true };
        if (r < 0.07) return { duplicate: true };
        if (r < 0.1) return { corrupt: true };
        if (r < 0.25) return { delayMs: 1 + Math.floor(rand() * 25) };
        return undefined;
      },
      9,
      300,
    );
    expect(relay.stats.corrupted).toBeGreaterThan(0);
    expect(relay.stats.duplicated).toBeGreaterThan(0);
    expect(relay.stats.delayed).toBeGreaterThan(0);
  });

  it('reports failure in bounded time when the path goes dead after setup', async () => {
    let dead = false;
    const { connect, accepted } = await setup(() => (dead ? { drop: true } : undefined), {
      ...FAST,
      rtoMax: 200,
      maxRetransmits: 4,
    });
    const client = await connect();
    await accepted;
    dead = true;
    const start = performance.now();
    client.send({ data: Buffer.from('into the void') });
    const info = await closed(client);
    expect(info.reason).toBe('timeout');
    expect(info.error?.code).toBe('ERR_SCTP_ASSOCIATION');
    expect(info.unsentBytes).toBe(13);
    expect(performance.now() - start).toBeLessThan(5_000);
  });

  it('fails connect in bounded time when nothing answers', async () => {
    const { connect } = await setup(() => ({ drop: true }), {
      ...FAST,
      rtoMax: 200,
      maxInitRetransmits: 3,
    });
    const start = performance.now();
    await expect(connect()).rejects.toMatchObject({ code: 'ERR_SCTP_CONNECT' });
    expect(performance.now() - start).toBeLessThan(5_000);
  });
});
