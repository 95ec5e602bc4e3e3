import { describe, expect, it } from 'vitest';
import { ChunkType, DataFlags, type RawChunk } from './chunk-types.js';
import {
  CodecError,
  decodeData,
  decodeInit,
  decodeSack,
  decodeShutdown,
  encodeCause,
  firstCause,
  PacketWriter,
  parsePacket,
  singleChunkPacket,
} from './codec.js';
import { writeSctpChecksum } from './crc32c.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

describe('codec', () => {
  it('writes an INIT byte for byte (RFC 9260 §3.3.2 layout) with its CRC32c', () => {
    const w = new PacketWriter(1472, 5000, 7, 0);
    w.init(ChunkType.INIT, {
      initiateTag: 0x01020304,
      aRwnd: 0x10000,
      outboundStreams: 10,
      inboundStreams: 2048,
      initialTsn: 0xfffffffe,
    });
    const p = w.finish();
    expect(p.subarray(0, 8).toString('hex')).toBe('1388000700000000');
    expect(p.subarray(12).toString('hex')).toBe(
      // type 1, flags 0, length 20 | tag | a_rwnd | OS 10 | MIS 2048 | initial TSN
      '01000014' + '01020304' + '00010000' + '000a' + '0800' + 'fffffffe',
    );
    const parsed = parsePacket(p);
    expect(parsed).not.toBeInstanceOf(CodecError);
    if (parsed instanceof CodecError) return;
    expect(parsed).toMatchObject({ srcPort: 5000, dstPort: 7, vtag: 0 });
    expect(decodeInit(parsed.chunks[0] as RawChunk)).toEqual({
      initiateTag: 0x01020304,
      aRwnd: 0x10000,
      outboundStreams: 10,
      inboundStreams: 2048,
      initialTsn: 0xfffffffe,
      cookie: undefined,
    });
  });

  it('decodes a usrsctp-style INIT ACK: skips unknown parameters, finds the cookie', () => {
    const value = hex(`
      aabbccdd 00020000 000a 000a 00000001
      c0000004
      80080007 82c0c100
      0007000c 11223344 55667788
      000c0006 00050000`);
    const c: RawChunk = { type: ChunkType.INIT_ACK, flags: 0, value };
    const init = decodeInit(c);
    expect(init).not.toBeInstanceOf(CodecError);
    expect((init as { cookie: Buffer }).cookie.toString('hex')).toBe('1122334455667788');
    expect(decodeInit({ ...c, value: value.subarray(0, 20) })).toMatchObject({
      reason: 'missing-cookie',
    });
  });

  it('round-trips DATA and SACK with gap blocks and duplicates', () => {
    const w = new PacketWriter(1472, 1, 2, 0xdeadbeef);
    expect(w.sack(100, 65536, [2, 3, 6, 6], [99])).toBe(true);
    expect(
      w.data(
        DataFlags.BEGIN | DataFlags.END | DataFlags.UNORDERED,
        101,
        3,
        9,
        51,
        Buffer.from('abc'),
      ),
    ).toBe(true);
    const p = parsePacket(w.finish());
    if (p instanceof CodecError) throw new Error(p.reason);
    expect(p.chunks.map((c) => c.type)).toEqual([ChunkType.SACK, ChunkType.DATA]);
    expect(decodeSack(p.chunks[0] as RawChunk)).toEqual({
      cumTsnAck: 100,
      aRwnd: 65536,
      gapBlocks: [2, 3, 6, 6],
      duplicates: 1,
    });
    const d = decodeData(p.chunks[1] as RawChunk);
    expect(d).toMatchObject({ flags: 7, tsn: 101, streamId: 3, ssn: 9, ppid: 51 });
    expect((d as { data: Buffer }).data.toString()).toBe('abc');
  });

  it('refuses without throwing: short packets, bad checksums, chunk lengths past the end', () => {
    expect(parsePacket(Buffer.alloc(3))).toMatchObject({ reason: 'short-packet' });
    const ok = singleChunkPacket(1, 2, 3, ChunkType.COOKIE_ACK, 0);
    expect(parsePacket(ok)).not.toBeInstanceOf(CodecError);
    const bad = Buffer.from(ok);
    bad[8] = (bad[8] as number) ^ 1;
    expect(parsePacket(bad)).toMatchObject({ reason: 'bad-checksum' });
    const long = Buffer.from(ok);
    long.writeUInt16BE(200, 14);
    writeSctpChecksum(long);
    expect(parsePacket(long)).toMatchObject({ reason: 'bad-chunk-length' });
    const zero = Buffer.from(ok);
    zero.writeUInt16BE(0, 14);
    writeSctpChecksum(zero);
    expect(parsePacket(zero)).toMatchObject({ reason: 'bad-chunk-length' });
    const trailing = Buffer.concat([ok, Buffer.alloc(2)]);
    writeSctpChecksum(trailing);
    expect(parsePacket(trailing)).toMatchObject({ reason: 'truncated-chunk' });
  });

  it('refuses malformed chunk values', () => {
    const raw = (type: number, value: Buffer): RawChunk => ({ type, flags: 0, value });
    expect(decodeData(raw(0, Buffer.alloc(11)))).toMatchObject({ reason: 'short-data' });
    expect(decodeData(raw(0, Buffer.alloc(12)))).toMatchObject({ reason: 'no-user-data' });
    expect(decodeInit(raw(1, Buffer.alloc(15)))).toMatchObject({ reason: 'short-init' });
    expect(decodeInit(raw(1, Buffer.alloc(16)))).toMatchObject({ reason: 'invalid-init' });
    const badParam = Buffer.concat([hex('00000001 00010000 0001 0001 00000001'), hex('00050002')]);
    expect(decodeInit(raw(1, badParam))).toMatchObject({ reason: 'bad-parameter-length' });
    expect(decodeSack(raw(3, hex('00000001 00001000 0002 0000 00010002')))).toMatchObject({
      reason: 'bad-sack-length',
    });
    expect(decodeSack(raw(3, hex('00000001 00001000 0001 0000 00030002')))).toMatchObject({
      reason: 'bad-gap-block',
    });
    expect(decodeShutdown(raw(7, Buffer.alloc(3)))).toMatchObject({ reason: 'short-shutdown' });
    // The 24-byte ABORT that sent npm `sctp` into an endless loop: a zero-length cause.
    expect(firstCause(raw(6, hex('00000000')))).toBeUndefined();
    expect(firstCause(raw(6, encodeCause(12, Buffer.from('bye'))))).toMatchObject({ code: 12 });
  });

  it('never writes past the packet size it was given', () => {
    const w = new PacketWriter(100, 1, 2, 3);
    expect(w.data(3, 1, 0, 0, 0, Buffer.alloc(72))).toBe(true);
    expect(w.data(3, 2, 0, 0, 0, Buffer.alloc(1))).toBe(false);
    expect(w.raw(ChunkType.COOKIE_ECHO, 0, Buffer.alloc(100))).toBe(false);
    expect(w.finish().length).toBe(100);
  });
});
