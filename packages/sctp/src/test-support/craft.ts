/**
 * Hand-made packets for the hostile-peer tests: a test speaks for one side of a memory link with
 * chunks it builds here (lengths, flags and tags as it likes), and reads the other side's answers.
 */
import type { Association } from '../association.js';
import { ChunkType, type ParsedPacket } from '../chunk-types.js';
import { CodecError, PacketWriter, parsePacket } from '../codec.js';

/** One chunk to write: its type, flags and value as given (the length field is 4 + value). */
export interface CraftedChunk {
  readonly type: number;
  readonly flags?: number;
  readonly value?: Buffer;
}

/** A packet with a valid checksum carrying `chunks` as given. */
export function craft(
  srcPort: number,
  dstPort: number,
  vtag: number,
  chunks: readonly CraftedChunk[],
): Buffer {
  const w = new PacketWriter(65_000, srcPort, dstPort, vtag);
  for (const c of chunks) w.raw(c.type, c.flags ?? 0, c.value);
  return w.finish();
}

/** A DATA chunk (flags default B|E: a whole message). */
export function data(
  tsn: number,
  payload: Buffer,
  o: { streamId?: number; ssn?: number; ppid?: number; flags?: number } = {},
): CraftedChunk {
  const v = Buffer.alloc(12 + payload.length);
  v.writeUInt32BE(tsn >>> 0, 0);
  v.writeUInt16BE(o.streamId ?? 0, 4);
  v.writeUInt16BE(o.ssn ?? 0, 6);
  v.writeUInt32BE(o.ppid ?? 0, 8);
  payload.copy(v, 12);
  return { type: ChunkType.DATA, flags: o.flags ?? 0x03, value: v };
}

/** A SACK chunk; `gaps` are start,end pairs written as given, `dups` as TSNs. */
export function sack(
  cumTsnAck: number,
  aRwnd: number,
  gaps: readonly number[] = [],
  dups: readonly number[] = [],
  o: { claimGaps?: number; claimDups?: number } = {},
): CraftedChunk {
  const v = Buffer.alloc(12 + 2 * gaps.length + 4 * dups.length);
  v.writeUInt32BE(cumTsnAck >>> 0, 0);
  v.writeUInt32BE(aRwnd >>> 0, 4);
  v.writeUInt16BE(o.claimGaps ?? gaps.length / 2, 8);
  v.writeUInt16BE(o.claimDups ?? dups.length, 10);
  let p = 12;
  for (const g of gaps) {
    v.writeUInt16BE(g, p);
    p += 2;
  }
  for (const d of dups) {
    v.writeUInt32BE(d >>> 0, p);
    p += 4;
  }
  return { type: ChunkType.SACK, value: v };
}

/** What an association's private state says the tests need (TSNs, not part of the API). */
export function tsnState(a: Association): {
  nextTsnIn: number;
  lastAckOut: number;
  nextTsnOut: number;
} {
  const x = a as unknown as {
    receiver: { cumTsn: number };
    sender: { lastCumAck: number; nextTsn: number };
  };
  return {
    nextTsnIn: (x.receiver.cumTsn + 1) >>> 0,
    lastAckOut: x.sender.lastCumAck,
    nextTsnOut: x.sender.nextTsn,
  };
}

/** Parses captured packets (all of them valid: they come from our engine). */
export function parsed(packets: readonly Buffer[]): ParsedPacket[] {
  return packets.map((p) => {
    const r = parsePacket(p);
    if (r instanceof CodecError) throw new Error(`captured packet does not parse: ${r.reason}`);
    return r;
  });
}

/** Error cause codes of every ERROR or ABORT chunk of `type` in the packets. */
export function causes(packets: readonly Buffer[], type: number): number[] {
  const out: number[] = [];
  for (const p of parsed(packets)) {
    for (const c of p.chunks) {
      if (c.type !== type) continue;
      for (let off = 0; off + 4 <= c.value.length; ) {
        out.push(c.value.readUInt16BE(off));
        const len = c.value.readUInt16BE(off + 2);
        if (len < 4) break;
        off += (len + 3) & ~3;
      }
    }
  }
  return out;
}
