import { describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import type { Association } from './association.js';
import { ChunkType } from './chunk-types.js';
import { manualTimers } from './test-support/manual-timers.js';
import { memoryLink } from './test-support/memory-link.js';
import { chunkTypes } from './test-support/udp-relay.js';

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

/** Advances the manual clock in steps, letting packets (delivered on setImmediate) cross between steps. */
async function run(
  timers: { advance(ms: number): void },
  totalMs: number,
  stepMs = 50,
): Promise<void> {
  for (let t = 0; t < totalMs; t += stepMs) {
    timers.advance(stepMs);
    await tick();
    await tick();
  }
}

async function established(opts = {}) {
  const timers = manualTimers();
  const link = memoryLink(
    {
      rtoInitial: 100,
      rtoMin: 100,
      rtoMax: 800,
      maxInitRetransmits: 4,
      maxRetransmits: 3,
      ...opts,
    },
    timers,
  );
  const client = link.connect();
  await waitFor(
    () => client.state === 'established' && link.accepted.length === 1,
    2_000,
    'established',
  );
  return { timers, link, client, server: link.accepted[0] as Association };
}

describe('association state machine (manual timers)', () => {
  it('retransmits INIT with doubling T1 up to rtoMax, then fails connect', async () => {
    const timers = manualTimers();
    const link = memoryLink({ rtoInitial: 100, rtoMax: 400, maxInitRetransmits: 4 }, timers);
    const sentAt: number[] = [];
    link.socketA.tap = (p) => {
      if (chunkTypes(p)[0] === ChunkType.INIT) sentAt.push(timers.now());
    };
    link.socketA.filter = () => undefined;
    const a = link.connect();
    let reason = '';
    a.on('close', (i) => {
      reason = i.reason;
    });
    await run(timers, 3000);
    expect(sentAt).toEqual([0, 100, 300, 700, 1100]);
    expect(reason).toBe('connect-failed');
  });

  it('retransmits on T3 with back-off, collapses cwnd, and fails after maxRetransmits', async () => {
    const { timers, link, client } = await established();
    const dataAt: number[] = [];
    link.socketA.tap = (p) => {
      if (chunkTypes(p).includes(ChunkType.DATA)) dataAt.push(timers.now());
    };
    link.socketA.filter = () => undefined;
    const cwndBefore = client.cwnd;
    client.send({ data: Buffer.alloc(100) });
    await tick();
    let info: Association['closeInfo'];
    client.on('close', (i) => {
      info = i;
    });
    await run(timers, 100);
    expect(client.cwnd).toBeLessThan(cwndBefore);
    await run(timers, 3000);
    const t0 = dataAt[0] as number;
    expect(dataAt.map((t) => t - t0)).toEqual([0, 100, 300, 700]);
    expect(info?.reason).toBe('timeout');
    expect(info?.unsentBytes).toBe(100);
  });

  it('applies receive backpressure: a paused receiver closes its window, resume reopens it', async () => {
    const { client, server } = await established({ receiveWindow: 16 * 1024 });
    const got: number[] = [];
    server.on('message', (m) => got.push(m.data.length));
    server.pause();
    for (let i = 0; i < 40; i++) client.send({ data: Buffer.alloc(1000) });
    await waitFor(
      async () => {
        await tick();
        return server.queuedBytes >= 16 * 1000 && server.advertisedWindow() < 1000;
      },
      2_000,
      'window closed',
    );
    const held = server.queuedBytes;
    for (let i = 0; i < 20; i++) await tick();
    expect(server.queuedBytes).toBeLessThanOrEqual(held + 1000);
    expect(client.bufferedAmount).toBeGreaterThan(0);
    expect(got).toHaveLength(0);
    server.resume();
    await waitFor(() => got.length === 40, 2_000, 'all delivered after resume');
  });

  it('reports send-side backpressure with false and drain, and refuses misuse with coded errors', async () => {
    const { client } = await established({ sendHighWaterMark: 4096, maxMessageBytes: 8192 });
    expect(() => client.send({ streamId: client.outboundStreams, data: Buffer.from('x') })).toThrow(
      expect.objectContaining({ code: 'ERR_SCTP_INVALID_STREAM' }),
    );
    expect(() => client.send({ data: Buffer.alloc(0) })).toThrow(
      expect.objectContaining({ code: 'ERR_SCTP_MESSAGE_SIZE' }),
    );
    expect(() => client.send({ data: Buffer.alloc(8193) })).toThrow(
      expect.objectContaining({ code: 'ERR_SCTP_MESSAGE_SIZE' }),
    );
    expect(client.send({ data: Buffer.alloc(3000) })).toBe(true);
    expect(client.send({ data: Buffer.alloc(3000) })).toBe(false);
    expect(() => client.send({ data: Buffer.alloc(8000) })).toThrow(
      expect.objectContaining({ code: 'ERR_SCTP_SEND_BUFFER_FULL' }),
    );
    await new Promise<void>((r) => client.once('drain', r));
    client.abort('done');
    expect(() => client.send({ data: Buffer.from('x') })).toThrow(
      expect.objectContaining({ code: 'ERR_SCTP_NOT_WRITABLE' }),
    );
  });

  // An MTU that leaves a fragment size not a multiple of 4 (1450 is VXLAN's) once made every
  // message larger than one fragment stall: a full fragment fitted unpadded but not padded, was
  // refused by the packet writer and counted as sent. Small chunks near a packet's end did the
  // same until the T3 timer. The clock never moves here, so only a prompt delivery passes.
  it.each([1450, 1451, 1452, 1453, 1500, 9001])(
    'delivers messages of every size at MTU %i without waiting for a retransmission',
    async (mtu) => {
      const { client, server } = await established({ mtu });
      // At MTU 1450 a packet holds 1 410 bytes of chunks: after 1 376 bytes (1 392 with the DATA
      // header) 18 are left, which a 2-byte message fits unpadded (18) but not padded (20).
      const sizes = [1_376, 2, 65_536, 1, 2, 3, 5, 7, 1_391, 1_393, 1_395, 1_397, 4_097, 65_535];
      for (let n = 1; n <= 40; n++) sizes.push(n * 37);
      const got: number[] = [];
      server.on('message', (m) => got.push(m.data.length));
      for (const n of sizes) client.send({ data: Buffer.alloc(n, n & 0xff) });
      await waitFor(() => got.length === sizes.length, 5_000, `all ${sizes.length} delivered`);
      expect(got).toEqual(sizes);
      expect(client.counters.retransmits).toBe(0);
      expect(client.counters.timeouts).toBe(0);
      client.abort('done');
    },
  );

  it('closes on a peer ABORT with its cause as detail', async () => {
    const { client, server } = await established();
    const reason = new Promise<string>((r) =>
      server.once('close', (i) => r(`${i.reason} ${i.detail}`)),
    );
    client.abort('going away');
    expect(await reason).toBe('abort-remote peer sent ABORT (cause 12: "going away")');
  });

  it('shuts down gracefully from the server side too, after queued data is acknowledged', async () => {
    const { client, server } = await established();
    const got: number[] = [];
    client.on('message', (m) => got.push(m.ppid));
    for (let i = 0; i < 20; i++) server.send({ ppid: i, data: Buffer.alloc(2000) });
    const reasons = Promise.all([
      new Promise((r) => client.once('close', (i) => r(i.reason))),
      new Promise((r) => server.once('close', (i) => r(i.reason))),
    ]);
    server.shutdown();
    expect(await reasons).toEqual(['shutdown', 'shutdown']);
    expect(got).toEqual(Array.from({ length: 20 }, (_, i) => i));
  });
});

describe('heartbeats', () => {
  it('are answered while the peer lives, and close an idle association whose peer went silent', async () => {
    const { timers, link, client, server } = await established({
      heartbeatInterval: 1000,
      maxRetransmits: 2,
    });
    let beats = 0;
    link.socketA.tap = (p) => {
      if (chunkTypes(p).includes(ChunkType.HEARTBEAT)) beats++;
    };
    await run(timers, 5000);
    expect(beats).toBeGreaterThanOrEqual(3);
    expect(client.state).toBe('established');
    expect(server.state).toBe('established');
    link.socketB.filter = () => undefined; // the server goes silent
    const info = new Promise<string>((r) => client.once('close', (i) => r(i.reason)));
    await run(timers, 6000);
    expect(await info).toBe('timeout');
  });
});

describe('out of the blue (RFC 9260 §8.4)', () => {
  it('answers an INIT for a port without a listener with ABORT (T=0, the initiate tag)', async () => {
    const timers = manualTimers();
    const link = memoryLink({}, timers);
    const replies: Buffer[] = [];
    link.socketB.filter = (p) => {
      replies.push(p);
      return p;
    };
    const a = link.a.connect(
      (await import('./options.js')).resolveAssociationOptions({}),
      '10.0.0.2',
      5999,
      1002,
      40100,
    );
    await waitFor(() => replies.length === 1, 2_000, 'reply');
    const r = replies[0] as Buffer;
    expect(chunkTypes(r)).toEqual([ChunkType.ABORT]);
    expect(r[13]).toBe(0);
    expect(r.readUInt32BE(4)).toBe(a.localTag);
    await waitFor(() => a.state === 'closed', 2_000, 'client closed');
    expect(a.closeInfo?.reason).toBe('connect-failed');
  });

  it('bounds SHUTDOWN-SENT with T5-shutdown-guard when the peer keeps sending DATA', async () => {
    const { timers, link, client, server } = await established({
      rtoMax: 400,
      maxRetransmits: 1000,
    });
    // The server side never answers SHUTDOWN, but keeps sending DATA (each restarts T2).
    link.socketA.filter = (p) => (chunkTypes(p).includes(ChunkType.SHUTDOWN) ? undefined : p);
    client.shutdown();
    await tick();
    expect(client.state).toBe('shutdown-sent');
    let info: Association['closeInfo'];
    client.on('close', (i) => {
      info = i;
    });
    for (let t = 0; t < 2100 && !info; t += 50) {
      if (server.state === 'established') server.send({ data: Buffer.alloc(10) });
      await run(timers, 50);
    }
    expect(info?.reason).toBe('timeout');
    expect(info?.detail).toContain('T5-shutdown-guard');
    expect(timers.now()).toBeGreaterThanOrEqual(2000);
  });

  it('keeps a peer-shut-down association open until a paused user has taken every message', async () => {
    const { timers, client, server } = await established({ maxRetransmits: 1000 });
    server.pause();
    for (let i = 0; i < 5; i++) client.send({ data: Buffer.from([i]) });
    client.shutdown();
    await run(timers, 1000);
    // Everything is acknowledged and the client asked to shut down, but the messages still wait.
    expect(server.state).toBe('shutdown-received');
    expect(client.state).toBe('shutdown-sent');
    const got: number[] = [];
    server.on('message', (m) => got.push(m.data[0] as number));
    server.resume();
    await run(timers, 500);
    expect(got).toEqual([0, 1, 2, 3, 4]);
    expect(server.closeInfo?.reason).toBe('shutdown');
    expect(client.closeInfo?.reason).toBe('shutdown');
  });
});
