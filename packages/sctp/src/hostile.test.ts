/**
 * A hostile peer, packet by packet: the test speaks for the client of a memory link with crafted
 * chunks (RFC 9260 rules on bundling, unknown chunks and parameters, verification tags and the T
 * bit, DATA and SACK fields the sender lies in, ABORT in every state) and checks what the other
 * side does: drop and count, answer as the RFC says, or end the association with an ABORT, never
 * throw (the endpoints' `exceptions` stay 0) or stall. Cookies, restart, buffers and the relay:
 * hostile-lifecycle.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import type { Association } from './association.js';
import { CauseCode, ChunkType, FLAG_T } from './chunk-types.js';
import { SctpEndpoint } from './endpoint.js';
import { causes, craft, data, parsed, sack, tsnState } from './test-support/craft.js';
import { OPTS, type Setup, tick, useHostileLinks } from './test-support/hostile-peer.js';
import { manualTimers } from './test-support/manual-timers.js';
import { memoryLink } from './test-support/memory-link.js';
import { chunkTypes } from './test-support/udp-relay.js';

const { links, setup } = useHostileLinks();

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
