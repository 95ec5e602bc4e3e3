import { describe, expect, it } from 'vitest';
import {
  crc32c,
  crc32cBytes,
  crc32cJs,
  crc32cUsesWasm,
  sctpChecksum,
  verifySctpChecksum,
  writeSctpChecksum,
} from './crc32c.js';

/** Bitwise reference, one byte and one bit at a time, to check the sliced tables against. */
function slowCrc(data: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of data) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  }
  return ~c >>> 0;
}

describe('crc32c', () => {
  it('matches the published check value and the RFC 3720 B.4 vectors', () => {
    expect(crc32c(Buffer.from('123456789'))).toBe(0xe3069283);
    expect(crc32c(new Uint8Array(32))).toBe(0x8a9136aa);
    expect(crc32c(new Uint8Array(32).fill(0xff))).toBe(0x62a8ab43);
    expect(crc32c(Uint8Array.from({ length: 32 }, (_, i) => i))).toBe(0x46dd794e);
    expect(crc32c(Uint8Array.from({ length: 32 }, (_, i) => 31 - i))).toBe(0x113fdb5c);
    expect(crc32c(new Uint8Array(0))).toBe(0);
  });

  it('agrees with a bitwise reference on every length and offset up to 40', () => {
    const data = Uint8Array.from({ length: 64 }, (_, i) => (i * 151 + 7) & 0xff);
    for (let start = 0; start < 8; start++) {
      for (let len = 0; len <= 40; len++) {
        expect(crc32c(data, start, start + len)).toBe(slowCrc(data.subarray(start, start + len)));
      }
    }
  });

  it('agrees with the reference on the word path: lengths up to 100 at every alignment', () => {
    const pool = Buffer.allocUnsafe(256);
    for (let i = 0; i < pool.length; i++) pool[i] = (i * 89 + 3) & 0xff;
    for (let offset = 0; offset < 8; offset++) {
      const data = pool.subarray(offset, offset + 120);
      for (let start = 0; start < 5; start++) {
        for (let len = 0; len <= 100; len += 1) {
          const want = slowCrc(data.subarray(start, start + len));
          expect(crc32c(data, start, start + len)).toBe(want);
          expect(crc32cJs(data, start, start + len)).toBe(want);
          expect(crc32cBytes(data, start, start + len)).toBe(want);
        }
      }
    }
    const packet = Uint8Array.from({ length: 1472 }, (_, i) => (i * 7 + 1) & 0xff);
    expect(crc32c(packet)).toBe(slowCrc(packet));
    expect(crc32cBytes(packet)).toBe(slowCrc(packet));
    expect(crc32cJs(packet)).toBe(slowCrc(packet));
  });

  it('uses WebAssembly here, in pieces for long inputs, with the same results', () => {
    expect(crc32cUsesWasm).toBe(true);
    const big = Uint8Array.from({ length: 200_000 }, (_, i) => (i * 13 + (i >> 9)) & 0xff);
    expect(crc32c(big)).toBe(slowCrc(big));
    expect(crc32c(big, 5, 150_001, 0x1234)).toBe(crc32cJs(big, 5, 150_001, 0x1234));
    for (const len of [64, 65, 1472, 9000, 65_535, 65_536, 65_537, 70_000]) {
      const packet = Buffer.from(big.subarray(3, 3 + len));
      const zeroed = Buffer.from(packet);
      zeroed.fill(0, 8, 12);
      expect(sctpChecksum(packet)).toBe(slowCrc(zeroed));
      // The packet itself is left as it was (the field is zeroed in the module's copy only).
      expect(packet.equals(Buffer.from(big.subarray(3, 3 + len)))).toBe(true);
    }
  });

  it('continues from a seed', () => {
    const data = Buffer.from('hello, stream control transmission protocol');
    expect(crc32c(data, 10, data.length, crc32c(data, 0, 10))).toBe(crc32c(data));
  });

  it('checksums an SCTP packet with its checksum field taken as zero, stored little-endian', () => {
    const packet = Buffer.alloc(28);
    packet.writeUInt16BE(5000, 0);
    packet.writeUInt16BE(5001, 2);
    packet.writeUInt32BE(0x01020304, 4);
    packet.fill(0xaa, 12);
    writeSctpChecksum(packet);
    const copy = Buffer.from(packet);
    copy.writeUInt32LE(0, 8);
    expect(packet.readUInt32LE(8)).toBe(crc32c(copy));
    expect(sctpChecksum(packet)).toBe(packet.readUInt32LE(8));
    expect(verifySctpChecksum(packet)).toBe(true);
    packet.writeUInt8(packet.readUInt8(20) ^ 1, 20);
    expect(verifySctpChecksum(packet)).toBe(false);
    expect(verifySctpChecksum(Buffer.alloc(5))).toBe(false);
  });
});
