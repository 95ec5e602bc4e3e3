/**
 * Packet and chunk codec. Decoding never throws: every function returns a {@link CodecError} for
 * input it cannot accept, because the bytes come from the network and one bad datagram must cost a
 * counter increment, not a process (npm `sctp` died on a 24-byte ABORT; see docs/sctp.md).
 */
import {
  ChunkType,
  COMMON_HEADER_BYTES,
  DATA_HEADER_BYTES,
  type DataChunk,
  type ErrorCause,
  type InitChunk,
  ParamType,
  type ParsedPacket,
  type RawChunk,
  type SackChunk,
} from './chunk-types.js';
import { verifySctpChecksum, writeSctpChecksum } from './crc32c.js';

/** Why a datagram or chunk was refused; `reason` is a stable short token, used as a counter name. */
export class CodecError {
  constructor(
    readonly reason: string,
    readonly detail: string,
  ) {}
}

/** Most chunks one packet may carry before it is refused: bounds work per datagram. */
export const MAX_CHUNKS_PER_PACKET = 256;

/**
 * Checks the checksum and the chunk bounds of a datagram, returning views into it. Everything the
 * association later reads lies inside a chunk whose length was checked here. `checksumVerified`:
 * the transport already checked the CRC32c (the C helper of `udpIo: 'helper'` does), so only the
 * bounds are checked here.
 */
export function parsePacket(buf: Buffer, checksumVerified = false): ParsedPacket | CodecError {
  if (buf.length < COMMON_HEADER_BYTES + 4)
    return new CodecError('short-packet', `${buf.length} bytes`);
  if (!checksumVerified && !verifySctpChecksum(buf))
    return new CodecError('bad-checksum', 'CRC32c mismatch');
  const chunks: RawChunk[] = [];
  let off = COMMON_HEADER_BYTES;
  while (off < buf.length) {
    if (buf.length - off < 4) return new CodecError('truncated-chunk', `chunk header at ${off}`);
    const len = buf.readUInt16BE(off + 2);
    if (len < 4 || off + len > buf.length)
      return new CodecError('bad-chunk-length', `length ${len} at ${off}`);
    if (chunks.length === MAX_CHUNKS_PER_PACKET)
      return new CodecError('too-many-chunks', `${chunks.length}`);
    chunks.push({
      type: buf[off] as number,
      flags: buf[off + 1] as number,
      value: buf.subarray(off + 4, off + len),
    });
    off += (len + 3) & ~3;
  }
  // RFC 9260 §6.10: INIT, INIT ACK and SHUTDOWN COMPLETE travel alone; a packet bundling one of
  // them with anything else is discarded whole (a COOKIE ECHO would otherwise ride with an INIT).
  if (chunks.length > 1) {
    for (const c of chunks) {
      if (
        c.type === ChunkType.INIT ||
        c.type === ChunkType.INIT_ACK ||
        c.type === ChunkType.SHUTDOWN_COMPLETE
      )
        return new CodecError('bad-bundling', `chunk type ${c.type} bundled with others`);
    }
  }
  return {
    srcPort: buf.readUInt16BE(0),
    dstPort: buf.readUInt16BE(2),
    vtag: buf.readUInt32BE(4),
    chunks,
  };
}

/** DATA: at least one byte of user data (RFC 9260 §6.2: an empty DATA chunk is a protocol error). */
export function decodeData(c: RawChunk): DataChunk | CodecError {
  const v = c.value;
  if (v.length < DATA_HEADER_BYTES - 4) return new CodecError('short-data', `${v.length}`);
  if (v.length === DATA_HEADER_BYTES - 4) return new CodecError('no-user-data', 'empty DATA chunk');
  return {
    flags: c.flags,
    tsn: v.readUInt32BE(0),
    streamId: v.readUInt16BE(4),
    ssn: v.readUInt16BE(6),
    ppid: v.readUInt32BE(8),
    data: v.subarray(12),
  };
}

/** INIT or INIT ACK, with the mandatory fields validated (§3.3.2: tag and stream counts non-zero). */
export function decodeInit(c: RawChunk): InitChunk | CodecError {
  const v = c.value;
  if (v.length < 16) return new CodecError('short-init', `${v.length}`);
  const initiateTag = v.readUInt32BE(0);
  const outboundStreams = v.readUInt16BE(8);
  const inboundStreams = v.readUInt16BE(10);
  if (initiateTag === 0 || outboundStreams === 0 || inboundStreams === 0) {
    return new CodecError('invalid-init', 'zero initiate tag or stream count');
  }
  let cookie: Buffer | undefined;
  let off = 16;
  while (off + 4 <= v.length) {
    const type = v.readUInt16BE(off);
    const len = v.readUInt16BE(off + 2);
    if (len < 4 || off + len > v.length)
      return new CodecError('bad-parameter-length', `length ${len}`);
    // Every other parameter (addresses, ECN, AUTH, extensions) is skipped: no multi-homing, no AUTH.
    if (type === ParamType.STATE_COOKIE) cookie = v.subarray(off + 4, off + len);
    off += (len + 3) & ~3;
  }
  if (c.type === ChunkType.INIT_ACK && cookie === undefined)
    return new CodecError('missing-cookie', 'INIT ACK without a State Cookie');
  return {
    initiateTag,
    aRwnd: v.readUInt32BE(4),
    outboundStreams,
    inboundStreams,
    initialTsn: v.readUInt32BE(12),
    cookie,
  };
}

/** SACK with its gap blocks; duplicate TSNs are only counted. */
export function decodeSack(c: RawChunk): SackChunk | CodecError {
  const v = c.value;
  if (v.length < 12) return new CodecError('short-sack', `${v.length}`);
  const nGaps = v.readUInt16BE(8);
  const nDups = v.readUInt16BE(10);
  if (12 + 4 * nGaps + 4 * nDups > v.length)
    return new CodecError('bad-sack-length', `${nGaps} gaps ${nDups} dups`);
  const gapBlocks: number[] = [];
  for (let i = 0; i < nGaps; i++) {
    const start = v.readUInt16BE(12 + 4 * i);
    const end = v.readUInt16BE(14 + 4 * i);
    if (start === 0 || end < start) return new CodecError('bad-gap-block', `${start}-${end}`);
    gapBlocks.push(start, end);
  }
  return { cumTsnAck: v.readUInt32BE(0), aRwnd: v.readUInt32BE(4), gapBlocks, duplicates: nDups };
}

/** SHUTDOWN's cumulative TSN ack. */
export function decodeShutdown(c: RawChunk): number | CodecError {
  if (c.value.length < 4) return new CodecError('short-shutdown', `${c.value.length}`);
  return c.value.readUInt32BE(0);
}

/** The first error cause of an ABORT or ERROR, or undefined when it carries none or a malformed one. */
export function firstCause(c: RawChunk): ErrorCause | undefined {
  const v = c.value;
  if (v.length < 4) return undefined;
  const len = v.readUInt16BE(2);
  if (len < 4 || len > v.length) return undefined;
  return { code: v.readUInt16BE(0), info: v.subarray(4, len) };
}

/**
 * Builds one outgoing packet in a fresh buffer (the UDP send may still hold the previous one).
 * Callers check {@link PacketWriter.room} before writing; writes past the end are refused.
 */
export class PacketWriter {
  readonly buf: Buffer;
  off = COMMON_HEADER_BYTES;
  chunks = 0;

  constructor(maxBytes: number, srcPort: number, dstPort: number, vtag: number) {
    this.buf = Buffer.allocUnsafe(maxBytes);
    this.buf.writeUInt16BE(srcPort, 0);
    this.buf.writeUInt16BE(dstPort, 2);
    this.buf.writeUInt32BE(vtag >>> 0, 4);
    this.buf.writeUInt32BE(0, 8);
  }

  /** Bytes still free. */
  room(): number {
    return this.buf.length - this.off;
  }

  private header(type: number, flags: number, length: number): number {
    const at = this.off;
    this.buf[at] = type;
    this.buf[at + 1] = flags;
    this.buf.writeUInt16BE(length, at + 2);
    return at + 4;
  }

  private pad(length: number): void {
    const padded = (length + 3) & ~3;
    this.buf.fill(0, this.off + length, this.off + padded);
    this.off += padded;
    this.chunks++;
  }

  /** A chunk with an opaque value (COOKIE ECHO, HEARTBEAT ACK, ABORT causes, ...). */
  raw(type: number, flags: number, value?: Uint8Array): boolean {
    const len = 4 + (value?.length ?? 0);
    if (((len + 3) & ~3) > this.room()) return false;
    const at = this.header(type, flags, len);
    if (value) this.buf.set(value, at);
    this.pad(len);
    return true;
  }

  /** A DATA chunk. */
  data(
    flags: number,
    tsn: number,
    streamId: number,
    ssn: number,
    ppid: number,
    payload: Buffer,
  ): boolean {
    const len = DATA_HEADER_BYTES + payload.length;
    if (((len + 3) & ~3) > this.room()) return false;
    const at = this.header(ChunkType.DATA, flags, len);
    const b = this.buf;
    b.writeUInt32BE(tsn >>> 0, at);
    b.writeUInt16BE(streamId, at + 4);
    b.writeUInt16BE(ssn & 0xffff, at + 6);
    b.writeUInt32BE(ppid >>> 0, at + 8);
    payload.copy(b, at + 12);
    this.pad(len);
    return true;
  }

  /** A SACK; `gaps` are start,end offset pairs, `dups` duplicate TSNs. */
  sack(
    cumTsnAck: number,
    aRwnd: number,
    gaps: readonly number[],
    dups: readonly number[],
  ): boolean {
    const len = 16 + 2 * gaps.length + 4 * dups.length;
    if (len > this.room()) return false;
    const at = this.header(ChunkType.SACK, 0, len);
    const b = this.buf;
    b.writeUInt32BE(cumTsnAck >>> 0, at);
    b.writeUInt32BE(Math.max(0, Math.min(aRwnd, 0xffffffff)) >>> 0, at + 4);
    b.writeUInt16BE(gaps.length / 2, at + 8);
    b.writeUInt16BE(dups.length, at + 10);
    let p = at + 12;
    for (const g of gaps) {
      b.writeUInt16BE(g, p);
      p += 2;
    }
    for (const d of dups) {
      b.writeUInt32BE(d >>> 0, p);
      p += 4;
    }
    this.pad(len);
    return true;
  }

  /** INIT or INIT ACK; `cookie` is written as a State Cookie parameter (INIT ACK only). */
  init(type: number, f: Omit<InitChunk, 'cookie'>, cookie?: Buffer): boolean {
    const len = 20 + (cookie ? (4 + cookie.length + 3) & ~3 : 0);
    if (len > this.room()) return false;
    const at = this.header(type, 0, len);
    const b = this.buf;
    b.writeUInt32BE(f.initiateTag >>> 0, at);
    b.writeUInt32BE(f.aRwnd >>> 0, at + 4);
    b.writeUInt16BE(f.outboundStreams, at + 8);
    b.writeUInt16BE(f.inboundStreams, at + 10);
    b.writeUInt32BE(f.initialTsn >>> 0, at + 12);
    if (cookie) {
      b.writeUInt16BE(ParamType.STATE_COOKIE, at + 16);
      b.writeUInt16BE(4 + cookie.length, at + 18);
      cookie.copy(b, at + 20);
    }
    this.pad(len);
    return true;
  }

  /**
   * Seals the packet (checksum) and returns the bytes written. `checksum` false leaves the
   * checksum field for a transport that writes it (the C helper of `udpIo: 'helper'`).
   */
  finish(checksum = true): Buffer {
    const out = this.buf.subarray(0, this.off);
    if (checksum) writeSctpChecksum(out);
    return out;
  }
}

/** An error cause TLV (code, info), padded as a chunk value needs. */
export function encodeCause(code: number, info?: Uint8Array): Buffer {
  const len = 4 + (info?.length ?? 0);
  const b = Buffer.alloc((len + 3) & ~3);
  b.writeUInt16BE(code, 0);
  b.writeUInt16BE(len, 2);
  if (info) b.set(info, 4);
  return b.subarray(0, len);
}

/** A one-chunk packet, for control replies made without an association (OOTB, INIT ACK). */
export function singleChunkPacket(
  srcPort: number,
  dstPort: number,
  vtag: number,
  type: number,
  flags: number,
  value?: Uint8Array,
): Buffer {
  const w = new PacketWriter(
    COMMON_HEADER_BYTES + 4 + ((value?.length ?? 0) + 3),
    srcPort,
    dstPort,
    vtag,
  );
  w.raw(type, flags, value);
  return w.finish();
}
