/**
 * A hostile peer over an association's life: cookies replayed, stale or too big, INIT on a live
 * association and restart, the per-address limit, a peer ignoring a_rwnd or filling the buffer with
 * data that can never be delivered, and what the relay tells the other side when one side fails.
 * Packet structure and fields: hostile.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import type { Association } from './association.js';
import type { SctpMessage } from './association-types.js';
import { CauseCode, ChunkType } from './chunk-types.js';
import { relayAssociations } from './relay.js';
import { causes, craft, data, parsed, tsnState } from './test-support/craft.js';
import { OPTS, tick, useHostileLinks } from './test-support/hostile-peer.js';
import { type MemoryLink, memoryLink } from './test-support/memory-link.js';
import { chunkTypes } from './test-support/udp-relay.js';

const { links, setup } = useHostileLinks();

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
