/**
 * When SACKs leave (`maxPacketsPerSack`, RFC 9260 §6.2): one per read batch of packets with DATA,
 * at once after `maxPacketsPerSack` of them, at once on a gap, and within the delayed-SACK time for
 * a lone packet. The test speaks for the client with crafted DATA, each packet in a callback of its
 * own within one turn of the event loop (microtasks run between them), as the datagrams of one
 * read batch are.
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { ChunkType } from './chunk-types.js';
import { resolveAssociationOptions } from './options.js';
import { data, parsed, tsnState } from './test-support/craft.js';
import { type Setup, tick, useHostileLinks } from './test-support/hostile-peer.js';

const { setup } = useHostileLinks();

/** The cumulative TSN of every SACK the server sent so far. */
const sacks = (s: Setup): number[] =>
  parsed(s.fromServer).flatMap((p) =>
    p.chunks.filter((c) => c.type === ChunkType.SACK).map((c) => c.value.readUInt32BE(0)),
  );

/** `n` packets of one DATA chunk each, in TSN order from `tsn`, read in one batch; then 3 turns. */
async function batch(s: Setup, tsn: number, n: number, skip = -1): Promise<void> {
  for (let i = 0; i < n; i++) {
    if (i === skip) continue;
    setImmediate(() =>
      s.toServer(s.server.localTag, [data((tsn + i) >>> 0, Buffer.from('m'), { ssn: i })]),
    );
  }
  for (let i = 0; i < 3; i++) await tick();
}

describe('SACK timing', () => {
  it('sends one SACK for a batch of packets read in one turn of the event loop', async () => {
    const s = await setup();
    const { nextTsnIn } = tsnState(s.server);
    await batch(s, nextTsnIn, 10);
    expect(sacks(s)).toEqual([(nextTsnIn + 9) >>> 0]);
    expect(s.got).toHaveLength(10);
  });

  it('sends a SACK at once after maxPacketsPerSack packets, the rest at the end of the batch', async () => {
    const s = await setup({ maxPacketsPerSack: 4 });
    const { nextTsnIn } = tsnState(s.server);
    await batch(s, nextTsnIn, 10);
    expect(sacks(s)).toEqual([nextTsnIn + 3, nextTsnIn + 7, nextTsnIn + 9].map((t) => t >>> 0));
  });

  it('with maxPacketsPerSack 2, sends a SACK after every second packet', async () => {
    const s = await setup({ maxPacketsPerSack: 2 });
    const { nextTsnIn } = tsnState(s.server);
    await batch(s, nextTsnIn, 10);
    expect(sacks(s)).toEqual([1, 3, 5, 7, 9].map((i) => (nextTsnIn + i) >>> 0));
  });

  it('answers a gap at once, and a lone packet within the delayed-SACK time', async () => {
    const s = await setup({ sackDelay: 30 });
    const { nextTsnIn } = tsnState(s.server);
    // TSN +2 missing: each of the 3 packets after the hole gets a SACK at once (the first also
    // covers the 2 before it).
    await batch(s, nextTsnIn, 6, 2);
    expect(sacks(s)).toEqual([1, 1, 1].map((i) => (nextTsnIn + i) >>> 0));
    s.fromServer.length = 0;
    await batch(s, (nextTsnIn + 2) >>> 0, 1); // fills the hole: a SACK at once
    expect(sacks(s)).toEqual([(nextTsnIn + 5) >>> 0]);
    s.fromServer.length = 0;
    await batch(s, (nextTsnIn + 6) >>> 0, 1); // one packet alone: the delayed-SACK timer
    expect(sacks(s)).toEqual([]);
    await waitFor(() => sacks(s).length === 1, 2_000, 'delayed SACK');
    expect(sacks(s)).toEqual([(nextTsnIn + 6) >>> 0]);
  });

  it('refuses a maxPacketsPerSack below 2', () => {
    expect(() => resolveAssociationOptions({ maxPacketsPerSack: 1 })).toThrow(RangeError);
    expect(resolveAssociationOptions().maxPacketsPerSack).toBe(16);
  });
});
