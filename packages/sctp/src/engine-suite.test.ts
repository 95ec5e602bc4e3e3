/**
 * The engine suite: the same engine-level tests against every engine tried (ours, werift-sctp and
 * npm sctp, each foreign one with the guard on and off), through an in-process UDP relay that can
 * drop, duplicate, delay, corrupt and inject. What each engine is expected to fail, and why, is in
 * test-support/suite-engines.ts; docs/sctp.md "Why our own engine" has the resulting table.
 */
import { describe, expect, it, type TestContext } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { ChunkType } from './chunk-types.js';
import { singleChunkPacket } from './codec.js';
import type { SctpAssociation, SctpAssociationOptions, SctpEngine, SctpMessage } from './index.js';
import { closed, collect, randomLoopback, randomPort, sendAll } from './test-support/loopback.js';
import { prng } from './test-support/prng.js';
import { SUITE_ENGINES, type SuiteEngine } from './test-support/suite-engines.js';
import { type Relay, type RelayPolicy, startRelay } from './test-support/udp-relay.js';
import { startPeer, usrsctpMissing } from './test-support/usrsctp.js';

/** Per-test deadlines: an expected failure costs at most these, not the test timeout. */
const CONNECT_MS = 8_000;
const DELIVER_MS = 15_000;
const CLOSE_MS = 6_000;
const TEST_MS = 60_000;

const passAll: RelayPolicy = () => undefined;

interface Setup {
  relay: Relay;
  connect: () => Promise<SctpAssociation>;
  accepted: Promise<SctpAssociation>;
}

/** Server and client engines (the client's may be another one) with a relay between them. */
async function setup(
  t: TestContext,
  server: SctpEngine,
  client: SctpEngine,
  policy: RelayPolicy = passAll,
): Promise<Setup> {
  t.onTestFinished(async () => {
    await client.close();
    await server.close();
  });
  const address = randomLoopback();
  const encapsulationPort = randomPort();
  const listener = await server.listen({ address, port: 6000, encapsulationPort });
  const accepted = new Promise<SctpAssociation>((resolve) => listener.once('association', resolve));
  const relay = await startRelay(address, address, encapsulationPort, policy);
  t.onTestFinished(() => relay.close());
  const connect = (): Promise<SctpAssociation> =>
    client.connect({
      address,
      port: 6000,
      encapsulationPort: relay.port,
      localAddress: address,
      signal: AbortSignal.timeout(CONNECT_MS),
    });
  return { relay, connect, accepted };
}

async function pair(
  t: TestContext,
  e: SuiteEngine,
  policy?: RelayPolicy,
  options?: SctpAssociationOptions,
): Promise<{ relay: Relay; client: SctpAssociation; server: SctpAssociation }> {
  const s = await setup(t, e.make(options), e.make(options), policy);
  const client = await s.connect();
  const server = await waitFor(() => s.accepted, CONNECT_MS, 'accepted');
  return { relay: s.relay, client, server };
}

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

/** Messages both ways; exactly once, in order per stream for ordered ones; optionally a shutdown. */
async function exchange(
  t: TestContext,
  e: SuiteEngine,
  policy: RelayPolicy,
  { seed = 1, count = 200, shutdown = false } = {},
): Promise<Relay> {
  const { relay, client, server } = await pair(t, e, policy);
  const rand = prng(seed);
  const make = (n: number): Array<Tagged & { data: Buffer }> =>
    Array.from({ length: n }, (_, id) => {
      const size = rand() < 0.1 ? 1500 + Math.floor(rand() * 6000) : 8 + Math.floor(rand() * 400);
      const data = Buffer.alloc(size, id & 0xff);
      data.writeUInt32BE(id, 0);
      data.writeUInt32BE(size, 4);
      return { streamId: id % 4, unordered: rand() < (e.faultUnordered ?? 0.2), id, data };
    });
  const up = make(count);
  const down = make(Math.floor(count / 4));
  const gotUp: Tagged[] = [];
  const gotDown: Tagged[] = [];
  const check = (list: Tagged[]) => (m: SctpMessage) => {
    expect(m.data.length).toBe(m.data.readUInt32BE(4));
    expect(m.data.subarray(8).every((b) => b === (m.data.readUInt32BE(0) & 0xff))).toBe(true);
    list.push({ streamId: m.streamId, unordered: m.unordered, id: m.data.readUInt32BE(0) });
  };
  server.on('message', check(gotUp));
  client.on('message', check(gotDown));
  await Promise.all([sendAll(client, up), sendAll(server, down)]);
  await waitFor(
    () => gotUp.length >= up.length && gotDown.length >= down.length,
    DELIVER_MS,
    'all messages',
  ).catch((err: unknown) => {
    throw new Error(
      `${String(err)}: ${gotUp.length}/${up.length} up, ${gotDown.length}/${down.length} down`,
    );
  });
  for (const [sent, got] of [
    [up, gotUp],
    [down, gotDown],
  ] as const) {
    expect(got.map((m) => m.id).sort((a, b) => a - b)).toEqual(sent.map((m) => m.id));
    for (let s = 0; s < 4; s++) {
      const ordered = (l: readonly Tagged[]) =>
        l.filter((m) => m.streamId === s && !sent[m.id]?.unordered).map((m) => m.id);
      expect(ordered(got)).toEqual(ordered(sent));
    }
  }
  if (shutdown) await gracefully(client, server);
  return relay;
}

/** `a` shuts down; both must close as `shutdown` within CLOSE_MS. */
async function gracefully(a: SctpAssociation, b: SctpAssociation): Promise<void> {
  const ac = closed(a);
  const bc = closed(b);
  a.shutdown();
  const within = <T>(p: Promise<T>): Promise<T> =>
    Promise.race([
      p,
      new Promise<T>((_, reject) =>
        setTimeout(() => reject(new Error(`not closed within ${CLOSE_MS} ms`)), CLOSE_MS),
      ),
    ]);
  expect((await within(ac)).reason).toBe('shutdown');
  expect((await within(bc)).reason).toBe('shutdown');
}

/** The server echoes; the client must get `n` fresh echoes back. */
async function stillEchoes(client: SctpAssociation, server: SctpAssociation): Promise<void> {
  server.on('message', (m) => server.send({ streamId: m.streamId, ppid: m.ppid, data: m.data }));
  const got = collect(client);
  for (let i = 0; i < 5; i++) client.send({ ppid: 7, data: Buffer.from(`still there ${i}`) });
  await waitFor(() => got.length >= 5, DELIVER_MS, 'echoes after the crafted packet');
  expect(got.map((m) => m.data.toString())).toEqual(
    Array.from({ length: 5 }, (_, i) => `still there ${i}`),
  );
}

/** A packet to the client as if from the server, with the client's tag and a valid CRC. */
function toClient(relay: Relay, client: SctpAssociation, type: number, value: Buffer): Buffer {
  return singleChunkPacket(
    client.remotePort,
    client.localPort,
    relay.tags.s2c ?? 0,
    type,
    0,
    value,
  );
}

/** Resolves when the event loop turned within `ms` (an engine in an endless loop never does). */
/**
 * The event loop still turns: a 20 ms timer fires within `ms`. What it catches is an engine stuck
 * on a crafted packet (a loop that never ends hangs the test; one that spins for seconds fails
 * here), so the bound is generous: a loaded 2-core CI machine can hold a timer back for a second.
 */
async function loopAlive(ms: number): Promise<void> {
  const start = performance.now();
  await new Promise((r) => setTimeout(r, 20));
  expect(performance.now() - start).toBeLessThan(ms);
}

type Body = (t: TestContext, e: SuiteEngine) => Promise<void>;

const tests: Array<[id: string, title: string, body: Body]> = [
  [
    'messages',
    'connects and keeps stream, PPID and U bit',
    async (t, e) => {
      const { client, server } = await pair(t, e);
      const got = collect(server);
      client.send({ streamId: 1, ppid: 51, data: Buffer.from('hello') });
      client.send({ streamId: 2, ppid: 52, unordered: true, data: Buffer.from('world') });
      await waitFor(() => got.length === 2, DELIVER_MS);
      const seen = got.map((m) => [m.streamId, m.ppid, m.unordered, m.data.toString()]);
      expect(seen.sort()).toEqual([
        [1, 51, false, 'hello'],
        [2, 52, true, 'world'],
      ]);
    },
  ],
  [
    'many-large',
    'moves 2 000 messages and a 300 000-byte one in order per stream',
    async (t, e) => {
      const { client, server } = await pair(t, e);
      const got = collect(server);
      const msgs = Array.from({ length: 2000 }, (_, i) => ({
        streamId: i % 3,
        ppid: i,
        data: Buffer.alloc(100 + (i % 7) * 1000, i & 0xff),
      }));
      msgs.push({ streamId: 0, ppid: 99, data: Buffer.alloc(300_000, 7) });
      await sendAll(client, msgs);
      await waitFor(() => got.length === msgs.length, DELIVER_MS);
      for (let s = 0; s < 3; s++) {
        const want = msgs.filter((m) => m.streamId === s).map((m) => m.ppid);
        expect(got.filter((m) => m.streamId === s).map((m) => m.ppid)).toEqual(want);
      }
      expect(got.at(-1)?.data.length).toBe(300_000);
    },
  ],
  [
    'many-associations',
    'serves 20 associations on one port',
    async (t, e) => {
      const server = e.make();
      const clientEngine = e.make();
      t.onTestFinished(async () => {
        await clientEngine.close();
        await server.close();
      });
      const address = randomLoopback();
      const encapsulationPort = randomPort();
      const l = await server.listen({ address, port: 5000, encapsulationPort });
      l.on('association', (a) => a.on('message', (m) => a.send(m)));
      const clients = await Promise.all(
        Array.from({ length: 20 }, () =>
          clientEngine.connect({
            address,
            port: 5000,
            encapsulationPort,
            localAddress: address,
            signal: AbortSignal.timeout(CONNECT_MS),
          }),
        ),
      );
      const got = clients.map(collect);
      for (const [i, c] of clients.entries()) c.send({ ppid: i, data: Buffer.from(`client ${i}`) });
      await waitFor(() => got.every((g) => g.length === 1), DELIVER_MS, 'every echo');
      for (const [i, g] of got.entries()) expect(g[0]?.data.toString()).toBe(`client ${i}`);
    },
  ],
  [
    'shutdown',
    'shuts down gracefully (both sides close as shutdown)',
    async (t, e) => {
      const { client, server } = await pair(t, e);
      const got = collect(server);
      client.send({ data: Buffer.from('before the shutdown') });
      await waitFor(() => got.length === 1, DELIVER_MS);
      await gracefully(client, server);
    },
  ],
  [
    'peer-shutdown',
    "closes after a peer's SHUTDOWN (our engine as the client)",
    async (t, e) => {
      const ours = SUITE_ENGINES[0] as SuiteEngine;
      const s = await setup(t, e.make(), ours.make());
      const client = await s.connect();
      const server = await waitFor(() => s.accepted, CONNECT_MS);
      await gracefully(client, server);
    },
  ],
];

const drops: Array<[string, 'c2s' | 's2c', number, boolean]> = [
  ['INIT', 'c2s', ChunkType.INIT, false],
  ['INIT-ACK', 's2c', ChunkType.INIT_ACK, false],
  ['COOKIE-ECHO', 'c2s', ChunkType.COOKIE_ECHO, false],
  ['COOKIE-ACK', 's2c', ChunkType.COOKIE_ACK, false],
  ['DATA', 'c2s', ChunkType.DATA, false],
  ['DATA-s2c', 's2c', ChunkType.DATA, false],
  ['SACK', 's2c', ChunkType.SACK, false],
  ['SHUTDOWN', 'c2s', ChunkType.SHUTDOWN, true],
  ['SHUTDOWN-ACK', 's2c', ChunkType.SHUTDOWN_ACK, true],
  ['SHUTDOWN-COMPLETE', 'c2s', ChunkType.SHUTDOWN_COMPLETE, true],
];
for (const [name, dir, type, shutdown] of drops) {
  tests.push([
    `drop-${name}`,
    `recovers when the first ${name} (${dir}) is dropped`,
    async (t, e) => {
      const relay = await exchange(t, e, dropFirst(dir, type), { seed: 7, count: 60, shutdown });
      expect(relay.stats.dropped).toBe(1);
    },
  ]);
}
for (const loss of [1, 5]) {
  tests.push([
    `loss-${loss}`,
    `delivers everything exactly once, in order, under ${loss} % seeded loss`,
    async (t, e) => {
      const rand = prng(100 + loss);
      const relay = await exchange(t, e, () => (rand() < loss / 100 ? { drop: true } : undefined), {
        seed: 3,
        count: 300,
      });
      expect(relay.stats.dropped).toBeGreaterThan(0);
    },
  ]);
}
tests.push(
  [
    'unordered-mix',
    'delivers a mix of ordered and unordered messages both ways, without faults',
    async (t, e) => {
      await exchange(t, { ...e, faultUnordered: 0.2 }, passAll, { seed: 5, count: 100 });
    },
  ],
  [
    'chaos',
    'survives reordering, duplication and corruption with 2 % loss',
    async (t, e) => {
      const rand = prng(77);
      const relay = await exchange(
        t,
        e,
        () => {
          const r = rand();
          if (r < 0.02) return { drop: true };
          if (r < 0.07) return { duplicate: true };
          if (r < 0.1) return { corrupt: true };
          if (r < 0.25) return { delayMs: 1 + Math.floor(rand() * 25) };
          return undefined;
        },
        { seed: 9, count: 300 },
      );
      expect(relay.stats.corrupted).toBeGreaterThan(0);
    },
  ],
  [
    'corrupt-data',
    'never delivers a DATA whose payload was corrupted under a stale CRC',
    async (t, e) => {
      let done = false;
      const { relay, client, server } = await pair(t, e, (d, types) => {
        if (!done && d === 'c2s' && types[0] === ChunkType.DATA) {
          done = true;
          return { corrupt: true, corruptAt: -1 };
        }
        return undefined;
      });
      const got = collect(server);
      client.send({ data: Buffer.alloc(64, 0x11) });
      await waitFor(() => got.length >= 1, DELIVER_MS);
      await new Promise((r) => setTimeout(r, 300));
      expect(relay.stats.corrupted).toBe(1);
      expect(got).toHaveLength(1);
      expect(got[0]?.data.every((b) => b === 0x11)).toBe(true);
    },
  ],
  [
    'bad-crc',
    'survives a datagram with the live tag and a bad CRC',
    async (t, e) => {
      const { relay, client, server } = await pair(t, e);
      const p = toClient(relay, client, ChunkType.HEARTBEAT, Buffer.from([0, 1, 0, 8, 1, 2, 3, 4]));
      p.writeUInt32LE((p.readUInt32LE(8) ^ 0xdeadbeef) >>> 0, 8);
      relay.inject('s2c', p);
      await loopAlive(5000);
      await stillEchoes(client, server);
    },
  ],
  [
    'crafted-abort',
    'stays responsive after a 24-byte ABORT whose cause has length 0',
    async (t, e) => {
      const { relay, client } = await pair(t, e);
      const cause = Buffer.from([0, 1, 0, 0, 0, 0, 0, 0]); // Invalid Stream Identifier, length 0
      relay.inject('s2c', toClient(relay, client, ChunkType.ABORT, cause));
      await loopAlive(5000);
      await new Promise((r) => setTimeout(r, 200));
      await loopAlive(5000);
      // Dropping it (the guard) or aborting on it are both fine; hanging or dying is not.
      expect(['established', 'closed']).toContain(client.state);
    },
  ],
  [
    'short-auth',
    'keeps the association after a truncated AUTH chunk',
    async (t, e) => {
      const { relay, client, server } = await pair(t, e);
      relay.inject('s2c', toClient(relay, client, ChunkType.AUTH, Buffer.alloc(0)));
      await loopAlive(5000);
      await stillEchoes(client, server);
    },
  ],
  [
    'short-forward-tsn',
    'keeps the association after a truncated FORWARD TSN chunk',
    async (t, e) => {
      const { relay, client, server } = await pair(t, e);
      relay.inject('s2c', toClient(relay, client, ChunkType.FORWARD_TSN, Buffer.alloc(2)));
      await loopAlive(5000);
      await stillEchoes(client, server);
    },
  ],
  [
    'dead-path',
    'reports failure within 10 s when the path dies after setup',
    async (t, e) => {
      let dead = false;
      // Our engine gives up after 4 timeouts of at most 200 ms (foreign ones keep their timers).
      const { client } = await pair(t, e, () => (dead ? { drop: true } : undefined), {
        rtoMax: 200,
        maxRetransmits: 4,
      });
      dead = true;
      const start = performance.now();
      client.send({ data: Buffer.from('into the void') });
      const info = await waitFor(() => client.closeInfo, 10_000, 'close');
      expect(info.reason).toBe('timeout');
      expect(performance.now() - start).toBeLessThan(10_000);
    },
  ],
  [
    'connect-nothing',
    'fails a connect within 10 s when nothing answers',
    async (t, e) => {
      const s = await setup(t, e.make(), e.make({ maxInitRetransmits: 3, rtoMax: 200 }), () => ({
        drop: true,
      }));
      const start = performance.now();
      const err = await s.connect().catch((x: unknown) => x);
      expect(performance.now() - start).toBeLessThan(10_000);
      expect(err).toMatchObject({ code: 'ERR_SCTP_CONNECT' });
    },
  ],
);

// Interop with usrsctp's echo_server and client (Debian libusrsctp-examples) over UDP encapsulation.
const interop: Array<[string, string, Body]> = [
  [
    'usrsctp-echo-server',
    'client to usrsctp echo_server: multi-stream, PPIDs, fragmented, graceful shutdown',
    async (t, e) => {
      const theirs = randomPort();
      const ours = theirs === 59999 ? 20000 : theirs + 1;
      const server = startPeer('echo_server', [String(theirs), String(ours)]);
      t.onTestFinished(() => server.kill());
      const engine = e.make();
      t.onTestFinished(() => engine.close());
      const a = await waitFor(
        () =>
          engine
            .connect({
              address: '127.0.0.1',
              port: 7,
              encapsulationPort: theirs,
              localAddress: '127.0.0.1',
              localEncapsulationPort: ours,
              signal: AbortSignal.timeout(2_000),
            })
            .catch(() => undefined),
        CONNECT_MS,
        'connect to usrsctp',
      );
      const got = collect(a);
      const msgs = Array.from({ length: 100 }, (_, i) => ({
        streamId: i % 5,
        ppid: 50 + (i % 3),
        data: Buffer.alloc(i % 25 === 7 ? 9000 : 100 + i, i & 0xff),
      }));
      await sendAll(a, msgs);
      await waitFor(() => got.length === msgs.length, DELIVER_MS, 'all echoes');
      for (let s = 0; s < 5; s++) {
        const sent = msgs.filter((m) => m.streamId === s);
        const back = got.filter((m) => m.streamId === s);
        expect(back.map((m) => [m.data.length, m.ppid])).toEqual(
          sent.map((m) => [m.data.length, m.ppid]),
        );
      }
      const c = closed(a);
      a.shutdown();
      const info = await Promise.race([
        c,
        new Promise<undefined>((r) => setTimeout(() => r(undefined), CLOSE_MS)),
      ]);
      expect(info?.reason).toBe('shutdown');
    },
  ],
  [
    'usrsctp-client',
    'usrsctp client to our server: echo, SCTP_SHUTDOWN_COMP, server closes as shutdown',
    async (t, e) => {
      const theirs = randomPort();
      const ours = theirs === 59999 ? 20000 : theirs + 1;
      const engine = e.make();
      t.onTestFinished(() => engine.close());
      const l = await engine.listen({ address: '127.0.0.1', port: 5001, encapsulationPort: ours });
      let reason = '';
      l.once('association', (a) => {
        a.on('message', (m) => a.send({ streamId: m.streamId, ppid: m.ppid, data: m.data }));
        a.once('close', (i) => {
          reason = i.reason;
        });
      });
      const peer = startPeer(
        'client',
        ['127.0.0.1', '5001', '0', String(theirs), String(ours)],
        true,
      );
      t.onTestFinished(() => peer.kill());
      const lines = Array.from({ length: 10 }, (_, i) => `line ${i} ${'x'.repeat(i)}\n`);
      for (const l of lines) peer.child.stdin?.write(l);
      peer.child.stdin?.end();
      const code = await Promise.race([
        peer.exited,
        new Promise<'hung'>((r) => setTimeout(() => r('hung'), DELIVER_MS)),
      ]);
      expect(code, `usrsctp client said: ${JSON.stringify(peer.stdout.slice(-300))}`).toBe(0);
      for (const l of lines) expect(peer.stdout).toContain(l);
      expect(peer.stdout).toContain('SCTP_SHUTDOWN_COMP');
      await waitFor(() => reason !== '', CLOSE_MS, 'server side closed');
      expect(reason).toBe('shutdown');
    },
  ],
];
for (const [id, title, body] of interop) {
  tests.push([
    id,
    `${title}${usrsctpMissing ? ` (skipped: ${usrsctpMissing})` : ''}`,
    usrsctpMissing ? async () => {} : body,
  ]);
}

/** Test ids, exported for the table check below. */
const ids = new Set(tests.map(([id]) => id));

describe('engine suite expectations', () => {
  it('names only tests that exist', () => {
    for (const e of SUITE_ENGINES)
      for (const id of Object.keys(e.expected)) expect(ids, `${e.name}: ${id}`).toContain(id);
  });
});

describe.each(SUITE_ENGINES)('engine suite: $name', (e) => {
  const d = e.concurrent ? describe.concurrent : describe;
  d('tests', () => {
    for (const [id, title, body] of tests) {
      // SCTP_SUITE_MEASURE=1 runs everything as plain tests: what an engine does today, unfiltered.
      const listed = e.expected[id];
      const x = process.env.SCTP_SUITE_MEASURE && listed?.kind !== 'skip' ? undefined : listed;
      const run = (t: TestContext): Promise<void> => body(t, e);
      if (x === undefined) it(`${id}: ${title}`, run, TEST_MS);
      else if (x.kind === 'fail')
        it.fails(`${id}: ${title} [expected to fail: ${x.reason}]`, run, TEST_MS);
      else if (x.kind === 'skip') it.skip(`${id}: ${title} [not run: ${x.reason}]`, run);
      else
        it(
          `${id}: ${title} [flaky: ${x.reason}]`,
          async (t) => {
            await run(t).catch((err: unknown) =>
              console.warn(`${e.name} ${id}: failed this time: ${String(err)}`),
            );
          },
          TEST_MS,
        );
    }
  });
});
