/**
 * A hostile peer, packet by packet: the test speaks for the client of a memory link with crafted
 * chunks (RFC 9260 rules on bundling, unknown chunks, verification tags, DATA and SACK fields the
 * sender lies in, ABORT in every state, cookies replayed or stale, INIT on a live association,
 * restart) and checks what the other side does: drop and count, answer as the RFC says, or end the
 * association with an ABORT, never throw (the endpoints' `exceptions` stay 0) or stall.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import type { Association } from './association.js';
import type { SctpMessage } from './association-types.js';
import { CauseCode, ChunkType, FLAG_T } from './chunk-types.js';
import { SctpEndpoint } from './endpoint.js';
import { relayAssociations } from './relay.js';
import { causes, craft, data, parsed, sack, tsnState } from './test-support/craft.js';
import { manualTimers } from './test-support/manual-timers.js';
import { type MemoryLink, memoryLink } from './test-support/memory-link.js';
import { chunkTypes } from './test-support/udp-relay.js';

const OPTS = { rtoInitial: 50, rtoMin: 50, rtoMax: 200, maxRetransmits: 4, heartbeatInterval: 0 };
const tick = (): Promise<void> => new Promise((r) => setImmediate(r));
const links: MemoryLink[] = [];

afterEach(async () => {
  for (const l of links.splice(0)) {
    expect(l.a.counters.exceptions).toBe(0);
    expect(l.b.counters.exceptions).toBe(0);
    await l.a.close();
    await l.b.close();
  }
});

interface Setup {
  link: MemoryLink;
  client: Association;
  server: Association;
  /** Everything the server sent since the setup. */
  fromServer: Buffer[];
  /** Everything the client sent since the setup. */
  fromClient: Buffer[];
  got: SctpMessage[];
  /** Delivers a crafted packet to the server as if the client had sent it. */
  toServer(vtag: number, chunks: Parameters<typeof craft>[3]): void;
  /** Delivers a crafted packet to the client as if the server had sent it. */
  toClient(vtag: number, chunks: Parameters<typeof craft>[3]): void;
}

async function setup(
  opts: Parameters<typeof memoryLink>[0] = {},
  limits: Parameters<typeof memoryLink>[2] = {},
): Promise<Setup> {
  const link = memoryLink({ ...OPTS, ...opts }, undefined, limits);
  links.push(link);
  const client = link.connect();
  await waitFor(
    () => client.state === 'established' && link.accepted.length === 1,
    5_000,
    'established',
  );
  const server = link.accepted[0] as Association;
  const got: SctpMessage[] = [];
  server.on('message', (m) => got.push(m));
  const fromServer: Buffer[] = [];
  const fromClient: Buffer[] = [];
  link.socketB.tap = (p) => fromServer.push(Buffer.from(p));
  link.socketA.tap = (p) => fromClient.push(Buffer.from(p));
  return {
    link,
    client,
    server,
    fromServer,
    fromClient,
    got,
    toServer: (vtag, chunks) =>
      link.b.receive(craft(client.localPort, 5000, vtag, chunks), '10.0.0.1', 1001),
    toClient: (vtag, chunks) =>
      link.a.receive(craft(5000, client.localPort, vtag, chunks), '10.0.0.2', 1002),
  };
}

describe('hostile peer: packet structure', () => {
  it('discards packets that bundle INIT, INIT ACK or SHUTDOWN COMPLETE with other chunks', async () => {
    const s = await setup();
    const { nextTsnIn } = tsnState(s.server);
    s.toServer(s.server.localTag, [
      data(nextTsnIn, Buffer.from('x')),
      { type: ChunkType.SHUTDOWN_COMPLETE },
    ]);
    s.toServer(s.server.localTag, [
      { type: ChunkType.INIT_ACK },
      data(nextTsnIn, Buffer.from('y')),
    ]);
    // An INIT with a COOKIE ECHO riding along makes nothing (no INIT ACK, no association).
    s.toServer(0, [
      { type: ChunkType.INIT, value: Buffer.alloc(16, 1) },
      { type: ChunkType.COOKIE_ECHO },
    ]);
    await tick();
    expect(s.link.b.counters.refused['bad-bundling']).toBe(3);
    expect(s.got).toHaveLength(0);
    expect(s.server.state).toBe('established');
    expect(s.link.b.counters.initsAnswered).toBe(1); // the real client's only
  });

  it('applies the four actions of an unknown chunk type, with at most one report per packet', async () => {
    const s = await setup();
    const unknown = (type: number) => ({ type, value: Buffer.alloc(8, 0xee) });
    const cases = [
      { type: 0x30, delivered: false, reported: false }, // 00: stop, discard
      { type: 0x70, delivered: false, reported: true }, // 01: stop, discard, report
      { type: 0xb0, delivered: true, reported: false }, // 10: skip
      { type: 0xf0, delivered: true, reported: true }, // 11: skip, report
    ];
    for (const c of cases) {
      const before = s.got.length;
      s.fromServer.length = 0;
      const { nextTsnIn } = tsnState(s.server);
      s.toServer(s.server.localTag, [
        unknown(c.type),
        data(nextTsnIn, Buffer.from('m'), { ssn: before }),
      ]);
      await tick();
      await tick();
      expect(s.got.length - before, `type ${c.type} delivered`).toBe(c.delivered ? 1 : 0);
      const reports = causes(s.fromServer, ChunkType.ERROR).filter(
        (x) => x === CauseCode.UNRECOGNIZED_CHUNK,
      );
      expect(reports.length, `type ${c.type} reported`).toBe(c.reported ? 1 : 0);
    }
    // 50 reportable unknown chunks in one packet: one ERROR, not 50.
    s.fromServer.length = 0;
    s.toServer(
      s.server.localTag,
      Array.from({ length: 50 }, () => unknown(0xf1)),
    );
    await tick();
    await tick();
    expect(
      causes(s.fromServer, ChunkType.ERROR).filter((x) => x === CauseCode.UNRECOGNIZED_CHUNK),
    ).toHaveLength(1);
    expect(s.server.state).toBe('established');
  });

  it('counts every refused datagram and reports one a second, escaped as hex', () => {
    const timers = manualTimers();
    const warnings: string[] = [];
    const ep = new SctpEndpoint(
      { send: () => undefined, close: (cb) => cb?.() },
      '10.0.0.2',
      1002,
      { timers, onWarning: (m) => warnings.push(m) },
    );
    const junk = Buffer.from('\u001b[31mnot sctp at all, and long enough', 'latin1');
    for (let i = 0; i < 100; i++) ep.receive(junk, '10.0.0.1', 1001);
    expect(ep.counters.refused['bad-checksum']).toBe(100);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(`first bytes ${junk.subarray(0, 16).toString('hex')}`);
    expect(warnings[0]).not.toContain('\u001b');
    timers.advance(1000);
    ep.receive(junk, '10.0.0.1', 1001);
    expect(warnings).toHaveLength(2);
    expect(warnings[1]).toContain('99 more refused');
  });

  it('skips unknown INIT parameters of every action and still sets up the association', async () => {
    const link = memoryLink(OPTS);
    links.push(link);
    const replies: Buffer[] = [];
    link.socketB.tap = (p) => replies.push(Buffer.from(p));
    const init = Buffer.alloc(16 + 4 * 8);
    init.writeUInt32BE(0x1234, 0); // initiate tag
    init.writeUInt32BE(65_536, 4);
    init.writeUInt16BE(4, 8);
    init.writeUInt16BE(4, 10);
    init.writeUInt32BE(77, 12);
    [0x0033, 0x4033, 0x8033, 0xc033].forEach((type, i) => {
      init.writeUInt16BE(type, 16 + 8 * i);
      init.writeUInt16BE(8, 18 + 8 * i);
    });
    link.b.receive(
      craft(40_999, 5000, 0, [{ type: ChunkType.INIT, value: init }]),
      '10.0.0.1',
      1001,
    );
    await tick();
    const ack = parsed(replies).find((p) => p.chunks[0]?.type === ChunkType.INIT_ACK);
    expect(ack?.vtag).toBe(0x1234);
  });

  it('aborts on a DATA chunk without user data (No User Data), and the real client learns it', async () => {
    const s = await setup();
    const { nextTsnIn } = tsnState(s.server);
    s.toServer(s.server.localTag, [data(nextTsnIn, Buffer.alloc(0))]);
    await waitFor(() => s.client.isClosed, 2_000, 'client closed');
    expect(s.server.closeInfo?.reason).toBe('protocol-error');
    expect(causes(s.fromServer, ChunkType.ABORT)).toEqual([CauseCode.NO_USER_DATA]);
    expect(s.client.closeInfo?.reason).toBe('abort-remote');
  });
});

describe('hostile peer: DATA and SACK fields that lie', () => {
  it('drops TSNs far outside the window and counts old ones as duplicates, delivering nothing', async () => {
    const s = await setup({ maxOutOfOrder: 64 });
    const { nextTsnIn } = tsnState(s.server);
    const far = [100, 70_000, 0x7fff_ffff, 0x8000_0000, 0x8000_0001];
    for (const d of far) s.toServer(s.server.localTag, [data(nextTsnIn + d, Buffer.from('far'))]);
    for (const d of [1, 1000, 0x7fff_fff0])
      s.toServer(s.server.localTag, [data(nextTsnIn - d, Buffer.from('old'))]);
    await tick();
    await tick();
    expect(s.got).toHaveLength(0);
    expect(s.server.counters.droppedChunks + s.server.counters.duplicateChunks).toBe(8);
    expect(tsnState(s.server).nextTsnIn).toBe(nextTsnIn >>> 0);
    // The real traffic is unaffected.
    s.client.send({ data: Buffer.from('real') });
    await waitFor(() => s.got.length === 1, 2_000, 'real message');
  });

  it('acknowledges DATA for a stream beyond the negotiated count, reports Invalid Stream, delivers nothing', async () => {
    const s = await setup({ inboundStreams: 4 });
    const { nextTsnIn } = tsnState(s.server);
    s.toServer(s.server.localTag, [data(nextTsnIn, Buffer.from('x'), { streamId: 9 })]);
    await tick();
    await tick();
    expect(s.got).toHaveLength(0);
    expect(tsnState(s.server).nextTsnIn).toBe((nextTsnIn + 1) >>> 0);
    expect(causes(s.fromServer, ChunkType.ERROR)).toContain(CauseCode.INVALID_STREAM);
    expect(s.server.state).toBe('established');
  });

  it('ignores SACKs for TSNs never sent, refuses lying lengths, survives overlapping and backward gap blocks', async () => {
    const s = await setup();
    s.link.socketB.filter = () => undefined; // the server's own SACKs are lost: the test speaks for it
    for (let i = 0; i < 6; i++) s.client.send({ data: Buffer.alloc(200, i) });
    await waitFor(() => s.fromClient.length > 0, 2_000, 'data sent');
    const { lastAckOut, nextTsnOut } = tsnState(s.client);
    const buffered = s.client.bufferedAmount;
    // A cumulative ack beyond anything sent: ignored whole.
    s.toClient(s.client.localTag, [sack(nextTsnOut + 1000, 1 << 20)]);
    // More gap blocks / duplicates claimed than the chunk holds: refused by the decoder.
    s.toClient(s.client.localTag, [sack(lastAckOut, 1 << 20, [1, 2], [], { claimGaps: 500 })]);
    s.toClient(s.client.localTag, [sack(lastAckOut, 1 << 20, [], [1], { claimDups: 65_535 })]);
    // A block that runs backwards (end < start) and one starting at 0: refused.
    s.toClient(s.client.localTag, [sack(lastAckOut, 1 << 20, [5, 2])]);
    s.toClient(s.client.localTag, [sack(lastAckOut, 1 << 20, [0, 3])]);
    await tick();
    expect(s.client.bufferedAmount).toBe(buffered);
    expect(s.client.counters.droppedChunks).toBe(4);
    // Overlapping, unordered, past-the-end blocks and lying duplicate lists: accepted, harmless.
    s.toClient(s.client.localTag, [
      sack(lastAckOut, 1 << 20, [3, 5, 1, 4, 2, 2, 40, 60000], [1, 2, 3, lastAckOut, 0xffffffff]),
    ]);
    s.toClient(s.client.localTag, [sack(lastAckOut, 0, [1, 1])]);
    await tick();
    expect(s.client.state).toBe('established');
    s.link.socketB.filter = undefined;
    await waitFor(
      () => s.got.length === 6 && s.client.bufferedAmount === 0,
      5_000,
      'all delivered',
    );
    expect(s.got.map((m) => m.data[0])).toEqual([0, 1, 2, 3, 4, 5]);
  });
});

describe('hostile peer: verification tags', () => {
  it('answers a wrong tag out of the blue and honours the T bit only with the right tag', async () => {
    const s = await setup();
    const { nextTsnIn } = tsnState(s.server);
    s.toServer((s.server.localTag + 1) >>> 0, [data(nextTsnIn, Buffer.from('x'))]);
    await tick();
    const ootb = parsed(s.fromServer).filter((p) => p.chunks[0]?.type === ChunkType.ABORT);
    expect(ootb).toHaveLength(1);
    expect(ootb[0]?.chunks[0]?.flags).toBe(FLAG_T);
    expect(ootb[0]?.vtag).toBe((s.server.localTag + 1) >>> 0);
    // T set with our own tag, T clear with the peer's tag, SHUTDOWN COMPLETE with T and our tag:
    // none of them may end the association.
    s.toServer(s.server.localTag, [{ type: ChunkType.ABORT, flags: FLAG_T }]);
    s.toServer(s.server.peerTag, [{ type: ChunkType.ABORT }]);
    s.toServer(s.server.localTag, [{ type: ChunkType.SHUTDOWN_COMPLETE, flags: FLAG_T }]);
    await tick();
    expect(s.server.state).toBe('established');
    expect(s.got).toHaveLength(0);
    // T set with the peer's tag: that is how a peer without our tag aborts (RFC 9260 §8.5.1).
    s.toServer(s.server.peerTag, [{ type: ChunkType.ABORT, flags: FLAG_T }]);
    await tick();
    expect(s.server.closeInfo?.reason).toBe('abort-remote');
  });

  it('ends an association on ABORT in every state, with every timer stopped', async () => {
    type State = Association['state'];
    const reach: Record<string, (s: Setup) => Promise<void>> = {
      'shutdown-pending': async (s) => {
        s.link.socketB.filter = () => undefined;
        s.client.send({ data: Buffer.alloc(100) });
        s.client.shutdown();
      },
      'shutdown-sent': async (s) => {
        s.link.socketB.filter = () => undefined;
        s.client.shutdown();
      },
      'shutdown-received': async (s) => {
        s.link.socketB.filter = () => undefined;
        s.client.send({ data: Buffer.alloc(100) });
        await waitFor(() => s.fromClient.length > 0, 2_000, 'data out');
        const cum = Buffer.alloc(4);
        cum.writeUInt32BE(tsnState(s.client).nextTsnIn - 1, 0);
        s.toClient(s.client.localTag, [{ type: ChunkType.SHUTDOWN, value: cum }]);
      },
      'shutdown-ack-sent': async (s) => {
        s.link.socketB.filter = () => undefined;
        const cum = Buffer.alloc(4);
        cum.writeUInt32BE(tsnState(s.client).nextTsnIn - 1, 0);
        s.toClient(s.client.localTag, [{ type: ChunkType.SHUTDOWN, value: cum }]);
      },
    };
    for (const [state, go] of Object.entries(reach)) {
      const s = await setup();
      await go(s);
      await waitFor(() => s.client.state === (state as State), 2_000, state);
      s.toClient(s.client.localTag, [{ type: ChunkType.ABORT }]);
      await tick();
      expect(s.client.closeInfo?.reason, state).toBe('abort-remote');
      const timers = s.client as unknown as Record<string, { running: boolean }>;
      for (const t of ['t1', 't2', 't3', 't5', 'sackTimer', 'hbTimer'])
        expect(timers[t]?.running, `${state}: ${t}`).toBe(false);
    }
    // COOKIE-WAIT and COOKIE-ECHOED: connect fails.
    for (const drop of [ChunkType.INIT, ChunkType.COOKIE_ECHO]) {
      const link = memoryLink(OPTS);
      links.push(link);
      link.socketA.filter = (p) => (chunkTypes(p)[0] === drop ? undefined : p);
      const a = link.connect();
      await waitFor(
        () => a.state === (drop === ChunkType.INIT ? 'cookie-wait' : 'cookie-echoed'),
        2_000,
        'handshake state',
      );
      await tick();
      link.a.receive(
        craft(5000, a.localPort, a.localTag, [{ type: ChunkType.ABORT }]),
        '10.0.0.2',
        1002,
      );
      expect(a.closeInfo?.reason).toBe('connect-failed');
    }
  });

  it('ignores SHUTDOWN and SHUTDOWN ACK before the association is up', async () => {
    const link = memoryLink(OPTS);
    links.push(link);
    let held: Buffer | undefined;
    link.socketB.filter = (p) => {
      if (chunkTypes(p)[0] !== ChunkType.COOKIE_ACK || held) return p;
      held = p;
      return undefined;
    };
    const a = link.connect();
    await waitFor(() => a.state === 'cookie-echoed' && held !== undefined, 2_000, 'cookie-echoed');
    const cum = Buffer.alloc(4);
    link.a.receive(
      craft(5000, a.localPort, a.localTag, [{ type: ChunkType.SHUTDOWN, value: cum }]),
      '10.0.0.2',
      1002,
    );
    link.a.receive(
      craft(5000, a.localPort, a.localTag, [{ type: ChunkType.SHUTDOWN_ACK }]),
      '10.0.0.2',
      1002,
    );
    expect(a.state).toBe('cookie-echoed');
    await waitFor(() => a.state === 'established', 2_000, 'COOKIE ECHO retransmitted, established');
  });
});

describe('hostile peer: cookies, INIT on a live association, restart', () => {
  it('makes one association per cookie: a replayed COOKIE ECHO brings no closed association back', async () => {
    const link = memoryLink(OPTS);
    links.push(link);
    let echo: Buffer | undefined;
    link.socketA.tap = (p) => {
      if (chunkTypes(p)[0] === ChunkType.COOKIE_ECHO) echo ??= Buffer.from(p);
    };
    const a = link.connect();
    await waitFor(() => a.state === 'established' && link.accepted.length === 1, 2_000, 'up');
    link.b.receive(echo as Buffer, '10.0.0.1', 1001); // its association lives: routed to it
    await tick();
    expect(link.accepted).toHaveLength(1);
    a.abort('done');
    await waitFor(() => link.accepted[0]?.isClosed === true, 2_000, 'server side closed');
    link.b.receive(echo as Buffer, '10.0.0.1', 1001);
    await tick();
    expect(link.accepted).toHaveLength(1);
    expect(link.b.counters.replayedCookies).toBe(1);
  });

  it('fails a connect at once when the INIT ACK carries a State Cookie too big for a packet', async () => {
    const link = memoryLink(OPTS);
    links.push(link);
    link.socketA.filter = (p) => (chunkTypes(p)[0] === ChunkType.INIT ? undefined : p);
    const a = link.connect();
    await tick();
    const v = Buffer.alloc(16 + 4 + 2000);
    v.writeUInt32BE(0x5555, 0);
    v.writeUInt32BE(65_536, 4);
    v.writeUInt16BE(4, 8);
    v.writeUInt16BE(4, 10);
    v.writeUInt16BE(7, 16); // State Cookie parameter
    v.writeUInt16BE(4 + 2000, 18);
    link.a.receive(
      craft(5000, a.localPort, a.localTag, [{ type: ChunkType.INIT_ACK, value: v }]),
      '10.0.0.2',
      1002,
    );
    expect(a.closeInfo?.reason).toBe('connect-failed');
    expect(a.closeInfo?.detail).toContain('does not fit');
  });

  it('answers a stale cookie with a Stale Cookie error, so the connect fails at once', async () => {
    const link = memoryLink({ ...OPTS, cookieLifetime: 1 });
    links.push(link);
    link.socketA.filter = (p) => p;
    const delayed: Buffer[] = [];
    link.socketA.filter = (p) => {
      if (chunkTypes(p)[0] !== ChunkType.COOKIE_ECHO) return p;
      delayed.push(p);
      setTimeout(() => link.b.receive(p, '10.0.0.1', 1001), 20);
      return undefined;
    };
    const a = link.connect();
    const start = performance.now();
    await waitFor(() => a.isClosed, 2_000, 'connect failed');
    expect(a.closeInfo?.reason).toBe('connect-failed');
    expect(a.closeInfo?.detail).toContain('stale cookie');
    expect(delayed).toHaveLength(1); // no COOKIE ECHO retransmission was needed
    expect(performance.now() - start).toBeLessThan(1_000);
    expect(link.b.counters.staleCookies).toBe(1);
    expect(link.accepted).toHaveLength(0);
  });

  it('answers an INIT on a live association without touching it, and takes a restart', async () => {
    const s = await setup();
    // A late or spoofed INIT on the live tuple: a stateless INIT ACK, the association untouched.
    const init = Buffer.alloc(16);
    init.writeUInt32BE(0xabcdef, 0);
    init.writeUInt32BE(65_536, 4);
    init.writeUInt16BE(4, 8);
    init.writeUInt16BE(4, 10);
    s.toServer(0, [{ type: ChunkType.INIT, value: init }]);
    await tick();
    await tick();
    expect(s.server.state).toBe('established');
    expect(s.client.state).toBe('established');
    // The client side's endpoint has no listener on its port: an INIT there gets an ABORT with
    // the INIT's own tag, which leaves the client's association alone.
    s.fromClient.length = 0;
    s.toClient(0, [{ type: ChunkType.INIT, value: init }]);
    await tick();
    const abort = parsed(s.fromClient).find((p) => p.chunks[0]?.type === ChunkType.ABORT);
    expect(abort?.vtag).toBe(0xabcdef);
    expect(s.client.state).toBe('established');
    s.client.send({ data: Buffer.from('still') });
    await waitFor(() => s.got.length === 1, 2_000, 'data after the INITs');
    // Restart: the client loses its state (no ABORT) and sets up again from the same port.
    const port = s.client.localPort;
    s.client.finish('abort-local', 'client crashed');
    const again = s.link.a.connect(
      (s.client as unknown as { opt: Parameters<MemoryLink['a']['connect']>[0] }).opt,
      '10.0.0.2',
      5000,
      1002,
      port,
    );
    await waitFor(() => again.state === 'established', 2_000, 'restarted');
    expect(s.server.closeInfo?.reason).toBe('restart');
    expect(s.link.accepted).toHaveLength(2);
  });

  it('bounds the associations of one peer address per listener', async () => {
    const link = memoryLink(OPTS, undefined, { maxAssociationsPerAddress: 2 });
    links.push(link);
    const all = [link.connect(), link.connect(), link.connect()];
    await waitFor(
      () => all.every((a) => a.state === 'established' || a.isClosed),
      2_000,
      'settled',
    );
    expect(all.map((a) => a.state)).toEqual(['established', 'established', 'closed']);
    expect(all[2]?.closeInfo?.reason).toBe('connect-failed');
    expect(link.b.counters.associationsRefused).toBe(1);
    all[0]?.abort('make room');
    await waitFor(() => link.accepted[0]?.isClosed === true, 2_000, 'room');
    const fourth = link.connect();
    await waitFor(() => fourth.state === 'established', 2_000, 'a slot freed');
  });
});

describe('hostile peer: receive buffer', () => {
  it('bounds what a peer ignoring a_rwnd makes it queue, and recovers after resume', async () => {
    const s = await setup({ receiveWindow: 16 * 1024, maxMessageBytes: 16 * 1024 });
    s.server.pause();
    const { nextTsnIn } = tsnState(s.server);
    for (let i = 0; i < 200; i++)
      s.toServer(s.server.localTag, [data(nextTsnIn + i, Buffer.alloc(1000, i), { ssn: i })]);
    await tick();
    expect(s.server.queuedBytes).toBeLessThanOrEqual(32 * 1024);
    expect(s.server.counters.droppedChunks).toBeGreaterThan(150);
    expect(s.server.state).toBe('established');
    const accepted = s.server.counters.messagesIn;
    s.server.resume();
    expect(s.got).toHaveLength(accepted);
    expect(s.got.map((m) => m.data[0])).toEqual([...Array(accepted).keys()]);
  });

  it('ends an association whose held data can never be delivered instead of stalling', async () => {
    // Fragments that never complete (each a BEGIN on its own stream), then whole messages whose
    // SSN was skipped: once the buffer is full, the next TSN cannot be taken and nothing queued
    // could free room, so the association ends with Out of Resource.
    for (const kind of ['fragments', 'skipped-ssn'] as const) {
      const s = await setup({ receiveWindow: 8 * 1024, maxMessageBytes: 8 * 1024 });
      const { nextTsnIn } = tsnState(s.server);
      for (let i = 0; i < 40 && !s.server.isClosed; i++) {
        const c =
          kind === 'fragments'
            ? data(nextTsnIn + i, Buffer.alloc(1000), { streamId: i % 8, ssn: i, flags: 0x02 })
            : data(nextTsnIn + i, Buffer.alloc(1000), { ssn: i + 1 });
        s.toServer(s.server.localTag, [c]);
      }
      await tick();
      expect(s.server.closeInfo?.reason, kind).toBe('protocol-error');
      expect(causes(s.fromServer, ChunkType.ABORT), kind).toEqual([CauseCode.OUT_OF_RESOURCE]);
      await waitFor(() => s.client.isClosed, 2_000, 'client told');
    }
  });
});

describe('hostile network: what the relay tells the other side', () => {
  async function relayed() {
    const front = memoryLink(OPTS);
    const back = memoryLink(OPTS);
    links.push(front, back);
    const client = front.connect();
    const endpointSide = back.connect();
    await waitFor(
      () =>
        client.state === 'established' &&
        endpointSide.state === 'established' &&
        front.accepted.length === 1 &&
        back.accepted.length === 1,
      5_000,
      'both sides up',
    );
    const relay = relayAssociations(front.accepted[0] as Association, endpointSide);
    const server = back.accepted[0] as Association;
    const got: SctpMessage[] = [];
    server.on('message', (m) => got.push(m));
    client.send({ data: Buffer.from('one') });
    await waitFor(() => got.length === 1, 2_000, 'relayed');
    return { front, back, client, endpointSide, server, relay };
  }

  it('aborts the client when the endpoint side gives up retransmitting (Association.Max.Retrans)', async () => {
    const r = await relayed();
    r.back.socketA.filter = () => undefined; // the endpoint is unreachable from now on
    r.back.socketB.filter = () => undefined;
    r.client.send({ data: Buffer.from('two') });
    await waitFor(() => r.client.isClosed, 10_000, 'client told');
    expect(r.endpointSide.closeInfo?.reason).toBe('timeout');
    // An ABORT reached the client (not a silent close): it names the other side's failure.
    expect(r.client.closeInfo?.reason).toBe('abort-remote');
    expect(r.client.closeInfo?.detail).toContain('timeout');
    expect((await r.relay.done).closedFirst).toBe('endpoint');
  });

  it('aborts the endpoint when the client aborts, and the endpoint hears it', async () => {
    const r = await relayed();
    r.client.abort('client gone');
    await waitFor(() => r.server.isClosed, 2_000, 'endpoint told');
    expect(r.server.closeInfo?.reason).toBe('abort-remote');
    expect(r.server.closeInfo?.detail).toContain('abort-remote');
    expect((await r.relay.done).closedFirst).toBe('client');
  });

  it('delivers what a client sent before shutting down while its endpoint was being dialled', async () => {
    const front = memoryLink(OPTS);
    const back = memoryLink(OPTS);
    links.push(front, back);
    const client = front.connect();
    await waitFor(() => front.accepted.length === 1, 2_000, 'client side up');
    const clientSide = front.accepted[0] as Association;
    clientSide.pause(); // as the proxy socket does until the endpoint is up
    for (let i = 0; i < 3; i++) client.send({ streamId: i, data: Buffer.from([i]) });
    client.shutdown();
    await waitFor(() => clientSide.state === 'shutdown-received', 2_000, 'client shut down');
    const endpointSide = back.connect();
    await waitFor(() => endpointSide.state === 'established', 2_000, 'endpoint dialled');
    const server = back.accepted[0] as Association;
    const got: number[] = [];
    server.on('message', (m) => got.push(m.data[0] as number));
    relayAssociations(clientSide, endpointSide);
    clientSide.resume();
    await waitFor(() => server.isClosed && client.isClosed, 5_000, 'both closed');
    expect(got).toEqual([0, 1, 2]);
    expect(client.closeInfo?.reason).toBe('shutdown');
    expect(server.closeInfo?.reason).toBe('shutdown');
  });
});
