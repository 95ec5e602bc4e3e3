/**
 * Random and mutated packets against a live association (and the listener's INIT / COOKIE ECHO
 * path). Nothing may throw inside the engine (the endpoint counts contained exceptions: that count
 * must stay 0), memory must stay bounded, and the link must still work afterwards.
 * SCTP_FUZZ_PACKETS sets the count (default 50 000; CI-long runs use 1 000 000), SCTP_FUZZ_SEED
 * replays a run.
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import type { Association } from './association.js';
import { ChunkType } from './chunk-types.js';
import { writeSctpChecksum } from './crc32c.js';
import { type CraftedChunk, craft, data, sack, tsnState } from './test-support/craft.js';
import { memoryLink } from './test-support/memory-link.js';
import { prng, seedFrom } from './test-support/prng.js';

const COUNT = Number(process.env.SCTP_FUZZ_PACKETS ?? 50_000);
const SEED = seedFrom('SCTP_FUZZ_SEED');

const TYPES = [
  0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 64, 128, 130, 132, 192, 193, 194, 63, 127,
  191, 255,
];

const ENDING = new Set<number>([
  ChunkType.ABORT,
  ChunkType.SHUTDOWN,
  ChunkType.SHUTDOWN_ACK,
  ChunkType.SHUTDOWN_COMPLETE,
]);

describe('fuzz', () => {
  it(`survives ${COUNT} random and mutated packets (seed ${SEED})`, {
    timeout: Math.max(60_000, COUNT / 2),
  }, async () => {
    const rand = prng(SEED);
    const int = (n: number): number => Math.floor(rand() * n);
    const link = memoryLink({
      rtoInitial: 50,
      rtoMin: 50,
      rtoMax: 200,
      receiveWindow: 64 * 1024,
      maxMessageBytes: 256 * 1024,
    });
    const corpus: Buffer[] = [];
    link.socketA.filter = (p) => {
      if (corpus.length < 200) corpus.push(Buffer.from(p));
      return p;
    };
    let client: Association = link.connect();
    await waitFor(() => client.state === 'established', 5_000, 'established');
    for (let i = 0; i < 50; i++)
      client.send({
        streamId: i % 3,
        ppid: i,
        unordered: i % 4 === 0,
        data: Buffer.alloc(1 + int(5000), i),
      });
    await waitFor(() => corpus.length >= 20 && client.bufferedAmount === 0, 5_000, 'corpus');
    // From here on the client's real packets are dropped: the fuzzer speaks for it.
    link.socketA.filter = () => undefined;
    link.socketB.filter = () => undefined;
    const heapBefore = process.memoryUsage().heapUsed;
    let restarts = 0;
    const reasons: Record<string, number> = {};
    const watched = new Set<Association>();

    const packet = (): Buffer => {
      const server = link.accepted.at(-1);
      if (server && !watched.has(server)) {
        watched.add(server);
        server.once('close', (i) => {
          const k = `${i.reason}: ${i.detail.slice(0, 40)}`;
          reasons[k] = (reasons[k] ?? 0) + 1;
        });
        // Data of its own in flight, so that fuzzed SACKs and SHUTDOWNs have something to ack.
        for (let k = 0; k < 8; k++)
          server.send({ streamId: k % 2, data: Buffer.alloc(1 + int(3000), k) });
      }
      // TSNs near the live ones (each side picks a random initial TSN): DATA reaches reassembly
      // and SACKs reach the sender instead of being dropped as far outside the window.
      const live = server !== undefined && !server.isClosed ? tsnState(server) : undefined;
      const near = (base: number | undefined): number =>
        ((base ?? int(0x100000000)) + int(80) - 20) >>> 0;
      const vtag = rand() < 0.9 && server ? server.localTag : rand() < 0.5 ? 0 : int(0x100000000);
      const mode = rand();
      let p: Buffer;
      if (mode < 0.2 && live !== undefined) {
        // Well-formed chunks with lying fields: fragments and flags in any order, streams past
        // the negotiated count, SACKs whose gap blocks overlap, run backwards or pass the end,
        // duplicate lists that lie, unknown chunks of every action, bundling the RFC forbids.
        const chunks: CraftedChunk[] = [];
        for (let k = 1 + int(4); k > 0; k--) {
          const r = rand();
          if (r < 0.45) {
            const len = rand() < 0.002 ? 0 : 1 + int(rand() < 0.8 ? 200 : 1400);
            chunks.push(
              data(near(live.nextTsnIn), Buffer.alloc(len, k), {
                streamId: rand() < 0.9 ? int(4) : int(0x10000),
                ssn: int(rand() < 0.9 ? 8 : 0x10000),
                ppid: int(0x100000000),
                flags: int(16),
              }),
            );
          } else if (r < 0.75) {
            const gaps: number[] = [];
            for (let g = int(6); g > 0; g--) gaps.push(int(rand() < 0.8 ? 40 : 0x10000), int(40));
            const dups: number[] = [];
            for (let d = int(4); d > 0; d--) dups.push(near(live.nextTsnIn));
            const claims = rand() < 0.1 ? { claimGaps: int(0x10000), claimDups: int(0x10000) } : {};
            chunks.push(sack(near(live.lastAckOut), int(0x100000000), gaps, dups, claims));
          } else if (r < 0.85) {
            chunks.push({ type: (int(4) << 6) | (16 + int(40)), value: Buffer.alloc(int(64)) });
          } else if (r < 0.9) {
            chunks.push({
              type: [ChunkType.INIT, ChunkType.INIT_ACK, ChunkType.SHUTDOWN_COMPLETE][
                int(3)
              ] as number,
              value: Buffer.alloc(int(24), 1),
            });
          } else {
            const v = Buffer.alloc(4 + int(40));
            v.writeUInt32BE(near(live.lastAckOut), 0);
            const types: number[] = [ChunkType.HEARTBEAT, ChunkType.HEARTBEAT_ACK, ChunkType.ERROR];
            types.push(rand() < 0.05 ? ChunkType.SHUTDOWN : ChunkType.COOKIE_ECHO);
            chunks.push({ type: types[int(types.length)] as number, value: v });
          }
        }
        p = craft(0, 0, 0, chunks);
      } else if (mode < 0.3) {
        p = Buffer.allocUnsafe(int(1500));
        for (let k = 0; k < p.length; k++) p[k] = int(256);
        if (rand() < 0.5 || p.length < 12) return p; // raw noise, usually a bad checksum
      } else if (mode < 0.6) {
        const n = 1 + int(4);
        const parts: Buffer[] = [Buffer.alloc(12)];
        for (let k = 0; k < n; k++) {
          const valueLen = rand() < 0.3 ? int(8) : int(rand() < 0.9 ? 64 : 1400);
          const c = Buffer.alloc(4 + valueLen + ((4 - (valueLen % 4)) % 4));
          c[0] = TYPES[int(TYPES.length)] as number;
          // Most ABORT / SHUTDOWN* chunks would just end the association (correctly): keep it alive
          // to reach deeper states.
          if (ENDING.has(c[0] as number) && rand() < 0.95)
            c[0] = rand() < 0.5 ? ChunkType.DATA : ChunkType.SACK;
          c[1] = int(256);
          c.writeUInt16BE(rand() < 0.85 ? 4 + valueLen : int(0x10000), 2);
          for (let q = 4; q < 4 + valueLen; q++) c[q] = rand() < 0.5 ? 0 : int(256);
          // Plausible TSNs and stream numbers near the live ones make DATA and SACK reach deep.
          if (
            (c[0] === ChunkType.DATA || c[0] === ChunkType.SACK || c[0] === ChunkType.SHUTDOWN) &&
            valueLen >= 4 &&
            server
          ) {
            c.writeUInt32BE(near(c[0] === ChunkType.DATA ? live?.nextTsnIn : live?.lastAckOut), 4);
          }
          parts.push(c);
        }
        p = Buffer.concat(parts);
      } else {
        p = Buffer.from(corpus[int(corpus.length)] as Buffer);
        const edits = 1 + int(6);
        for (let k = 0; k < edits; k++) {
          const r = rand();
          if (r < 0.6 && p.length > 12) p[12 + int(p.length - 12)] = int(256);
          else if (r < 0.8 && p.length > 16) p = p.subarray(0, 12 + int(p.length - 12));
          else if (p.length >= 16) {
            const at = 14 + 4 * int(Math.floor((p.length - 16) / 4) + 1); // a chunk length field, roughly
            if (at + 2 <= p.length) p.writeUInt16BE(int(0x10000), at);
          }
        }
      }
      p.writeUInt16BE(server?.remotePort ?? 40000, 0);
      p.writeUInt16BE(5000, 2);
      p.writeUInt32BE(vtag >>> 0, 4);
      if (rand() < 0.97) writeSctpChecksum(p);
      return p;
    };

    try {
      for (let i = 0; i < COUNT; i++) {
        link.b.receive(packet(), '10.0.0.1', 1001);
        if (process.env.SCTP_FUZZ_TRACE && i % 50_000 === 0) {
          const heap = Math.round(process.memoryUsage().heapUsed / 1e6);
          console.log(
            `${i} ${Math.round(performance.now())} ms assocs ${link.b.associationCount}/${link.a.associationCount} restarts ${restarts} heap ${heap} MB`,
          );
        }
        if (i % 50 === 49) {
          // Microtasks (the associations' flushes) run here; the event loop only now and then,
          // because a yield costs a scheduling round on a loaded machine.
          if (i % 5000 === 4999) await new Promise((r) => setImmediate(r));
          else await Promise.resolve();
          // A fuzzed ABORT or protocol violation may end the association: start another.
          if (
            client.state === 'closed' ||
            link.accepted.at(-1)?.state === 'closed' ||
            link.accepted.length === 0
          ) {
            restarts++;
            link.socketA.filter = undefined;
            link.socketB.filter = undefined;
            client.abort('fuzz restart');
            client = link.connect();
            const deadline = performance.now() + 5_000;
            while (client.state !== 'established' && performance.now() < deadline)
              await new Promise((r) => setImmediate(r));
            if (client.state !== 'established')
              throw new Error(`no new association: ${client.state}`);
            link.socketA.filter = () => undefined;
            link.socketB.filter = () => undefined;
          }
          // Plain checks on the live association only: this runs 20 000 times per million packets.
          const live = link.accepted.at(-1);
          if (
            live &&
            (live.queuedBytes > 64 * 1024 + 256 * 1024 || live.bufferedAmount > 2 << 20)
          ) {
            throw new Error(
              `queues past their bounds: ${live.queuedBytes} queued, ${live.bufferedAmount} buffered`,
            );
          }
        }
      }
      expect(link.b.counters.exceptions).toBe(0);
      expect(link.a.counters.exceptions).toBe(0);
      expect(link.b.associationCount).toBeLessThan(2000);
      const heapGrowth = process.memoryUsage().heapUsed - heapBefore;
      expect(heapGrowth).toBeLessThan(128 * 1024 * 1024);
      // The engine still works: a fresh association carries data end to end.
      link.socketA.filter = undefined;
      link.socketB.filter = undefined;
      client.abort('fuzz done');
      const fresh = link.connect();
      await waitFor(() => fresh.state === 'established', 5_000, 'fresh association');
      const server = link.accepted.at(-1) as Association;
      const got: Buffer[] = [];
      server.on('message', (m) => got.push(m.data));
      fresh.send({ data: Buffer.from('still alive') });
      await waitFor(() => got.length === 1, 5_000, 'message after fuzzing');
      expect(got[0]?.toString()).toBe('still alive');
      console.log(
        `fuzz: ${COUNT} packets, seed ${SEED}, ${restarts} restart(s), refused ${JSON.stringify(link.b.counters.refused)}, ` +
          `ootb ${link.b.counters.outOfTheBlue}, closes ${JSON.stringify(reasons)}, heap +${Math.round(heapGrowth / 1024)} KiB`,
      );
    } catch (err) {
      console.error(`fuzz failed; replay with SCTP_FUZZ_SEED=${SEED} SCTP_FUZZ_PACKETS=${COUNT}`);
      throw err;
    } finally {
      await link.a.close();
      await link.b.close();
    }
  });
});
