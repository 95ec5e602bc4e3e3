import { describe, expect, it } from 'vitest';
import { DataFlags } from './chunk-types.js';
import { ENTRY_OVERHEAD, type InboundMessage, Receiver } from './reassembly.js';

const B = DataFlags.BEGIN;
const E = DataFlags.END;
const U = DataFlags.UNORDERED;

function receiver(limits = { maxMessageBytes: 1 << 20, maxHeldBytes: 1 << 20, maxOutOfOrder: 64 }) {
  const got: InboundMessage[] = [];
  const r = new Receiver(1000, 4, limits, (m) => got.push(m));
  const chunk = (tsn: number, flags: number, ssn: number, data: string, streamId = 0) => ({
    flags,
    tsn,
    streamId,
    ssn,
    ppid: tsn,
    data: Buffer.from(data),
  });
  return { r, got, chunk };
}

describe('Receiver', () => {
  it('reassembles out-of-order fragments and delivers ordered messages by SSN, unordered at once', () => {
    const { r, got, chunk } = receiver();
    expect(r.receive(chunk(1002, E, 0, 'c'), false, 0)).toBe('new');
    expect(r.receive(chunk(1003, B | E | U, 0, 'u'), false, 0)).toBe('new');
    expect(got.map((m) => m.data.toString())).toEqual(['u']);
    expect(r.gapBlocks()).toEqual([3, 4]);
    expect(r.receive(chunk(1000, B, 0, 'a'), false, 0)).toBe('new');
    expect(r.cumTsn).toBe(1000);
    expect(r.gapBlocks()).toEqual([2, 3]);
    expect(r.receive(chunk(1001, 0, 0, 'b'), false, 0)).toBe('new');
    expect(r.cumTsn).toBe(1003);
    expect(r.hasGaps).toBe(false);
    expect(got.map((m) => m.data.toString())).toEqual(['u', 'abc']);
    expect(r.heldBytes).toBe(0);
  });

  it('holds a later SSN until the earlier one completes, and reports duplicates', () => {
    const { r, got, chunk } = receiver();
    r.receive(chunk(1001, B | E, 1, 'second'), false, 0);
    expect(got).toHaveLength(0);
    expect(r.heldBytes).toBe(6 + ENTRY_OVERHEAD);
    r.receive(chunk(1000, B | E, 0, 'first'), false, 0);
    expect(got.map((m) => m.data.toString())).toEqual(['first', 'second']);
    expect(r.receive(chunk(1000, B | E, 0, 'first'), false, 0)).toBe('duplicate');
    expect(r.takeDuplicates()).toEqual([1000]);
    expect(r.takeDuplicates()).toEqual([]);
  });

  it('bounds what it holds: drops beyond the limits, refuses TSNs too far ahead, flags an endless message', () => {
    const { r, chunk } = receiver({ maxMessageBytes: 300, maxHeldBytes: 400, maxOutOfOrder: 4 });
    expect(r.receive(chunk(1010, B | E, 0, 'far'), false, 0)).toBe('dropped');
    expect(r.receive(chunk(1000, B, 0, 'x'.repeat(200)), false, 0)).toBe('new');
    expect(r.receive(chunk(1001, 0, 0, 'y'.repeat(200)), false, 0)).toBe('too-big');
    // 100 bytes wait for the user: a message that would be held is dropped (it comes back)...
    expect(r.receive(chunk(1001, B | E, 5, 'z'), false, 100)).toBe('dropped');
    expect(r.receive(chunk(1001, B | E, 0, 'z'), false, 0)).toBe('new');
    expect(r.receive(chunk(1002, B | E, 1, 'w'), true, 0)).toBe('dropped'); // window closed: nothing new
    expect(r.receive(chunk(1002, B | E, 0, 'v', 9), false, 0)).toBe('invalid-stream');
  });

  it('takes the gap filler that releases held messages even when the buffer is full', () => {
    const { r, got, chunk } = receiver({
      maxMessageBytes: 300,
      maxHeldBytes: 400,
      maxOutOfOrder: 16,
    });
    const body = 'x'.repeat(100);
    expect(r.receive(chunk(1001, B | E, 1, body), false, 0)).toBe('new');
    expect(r.receive(chunk(1002, B | E, 2, body), false, 0)).toBe('new');
    expect(r.receive(chunk(1003, B | E, 3, body), false, 0)).toBe('dropped'); // full: 2 × 164 held
    // SSN 0 is delivered at once, so it is taken (it was refused, for good, before: a stall).
    expect(r.receive(chunk(1000, B | E, 0, body), false, 0)).toBe('new');
    expect(got.map((m) => m.ppid)).toEqual([1000, 1001, 1002]);
    expect(r.heldBytes).toBe(0);
    // Not while the user's queue is itself full.
    expect(r.receive(chunk(1003, B | E, 3, body), false, 350)).toBe('dropped');
  });
});
