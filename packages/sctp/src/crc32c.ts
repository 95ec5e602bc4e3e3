/**
 * CRC32c (Castagnoli, reflected polynomial 0x82F63B78), the SCTP checksum (RFC 9260 appendix B).
 * Slicing-by-16 tables, read four bytes at a time through an `Int32Array` view where the host is
 * little-endian: the checksum runs in JavaScript over every packet in both directions (twice per
 * byte in a proxy), so it is the hottest loop of the engine. Measured (CPU time, 1 472-byte
 * packets): one table look-up per byte ~100 MB/s, slicing-by-8 with byte loads ~400 MB/s, this
 * ~700 MB/s; the same tables in WebAssembly (crc32c-wasm.ts), used for inputs of 64 bytes and more
 * when available, ~1.5x that again.
 */
import { createWasmCrc32c } from './crc32c-wasm.js';

const POLY = 0x82f63b78;

/** Sixteen 256-entry tables; table k maps a byte to its CRC contribution k bytes further on. */
const TABLES: Int32Array = (() => {
  const t = new Int32Array(16 * 256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
    t[n] = c;
  }
  for (let n = 0; n < 256; n++) {
    let c = t[n] as number;
    for (let k = 1; k < 16; k++) {
      c = (t[c & 0xff] as number) ^ (c >>> 8);
      t[k * 256 + n] = c;
    }
  }
  return t;
})();

/** Word reads through a typed-array view give the bytes in host order: the fast path needs LE. */
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** Sixteen bytes folded in: `a..d` are the next four little-endian words, `a` already xored. */
function fold16(t: Int32Array, a: number, b: number, c: number, d: number): number {
  return (
    (t[3840 + (a & 0xff)] as number) ^
    (t[3584 + ((a >>> 8) & 0xff)] as number) ^
    (t[3328 + ((a >>> 16) & 0xff)] as number) ^
    (t[3072 + (a >>> 24)] as number) ^
    (t[2816 + (b & 0xff)] as number) ^
    (t[2560 + ((b >>> 8) & 0xff)] as number) ^
    (t[2304 + ((b >>> 16) & 0xff)] as number) ^
    (t[2048 + (b >>> 24)] as number) ^
    (t[1792 + (c & 0xff)] as number) ^
    (t[1536 + ((c >>> 8) & 0xff)] as number) ^
    (t[1280 + ((c >>> 16) & 0xff)] as number) ^
    (t[1024 + (c >>> 24)] as number) ^
    (t[768 + (d & 0xff)] as number) ^
    (t[512 + ((d >>> 8) & 0xff)] as number) ^
    (t[256 + ((d >>> 16) & 0xff)] as number) ^
    (t[d >>> 24] as number)
  );
}

const WASM = createWasmCrc32c(TABLES);
/** Below this many bytes the copy into wasm memory costs more than it saves. */
const WASM_MIN_BYTES = 64;

/** True when the WebAssembly path is in use (for the tests). */
export const crc32cUsesWasm = WASM !== undefined;

/**
 * The CRC32c of `data[start, end)`, continuing from `seed` (a previous result) when given, so a
 * packet can be checksummed around its zeroed checksum field without copying.
 */
export function crc32c(data: Uint8Array, start = 0, end = data.length, seed = 0): number {
  if (WASM !== undefined && end - start >= WASM_MIN_BYTES)
    return WASM.crc32c(data, start, end, seed);
  return crc32cJs(data, start, end, seed);
}

/** {@link crc32c} in JavaScript only (exported for the tests). */
export function crc32cJs(data: Uint8Array, start = 0, end = data.length, seed = 0): number {
  if (!LITTLE_ENDIAN) return crc32cBytes(data, start, end, seed);
  const t = TABLES;
  let crc = ~seed;
  let i = start;
  // Up to the first 4-byte aligned address, then whole 16-byte blocks as words, then the tail.
  const head = Math.min(end, i + ((4 - ((data.byteOffset + i) & 3)) & 3));
  while (i < head) {
    crc = (t[(crc ^ (data[i] as number)) & 0xff] as number) ^ (crc >>> 8);
    i++;
  }
  const blocks = (end - i) >> 4;
  if (blocks > 0) {
    const w = new Int32Array(data.buffer, data.byteOffset + i, blocks * 4);
    for (let j = 0; j < w.length; j += 4) {
      crc = fold16(
        t,
        crc ^ (w[j] as number),
        w[j + 1] as number,
        w[j + 2] as number,
        w[j + 3] as number,
      );
    }
    i += blocks * 16;
  }
  while (i < end) {
    crc = (t[(crc ^ (data[i] as number)) & 0xff] as number) ^ (crc >>> 8);
    i++;
  }
  return ~crc >>> 0;
}

/** {@link crc32c} with byte loads only (big-endian hosts; exported for the tests). */
export function crc32cBytes(data: Uint8Array, start = 0, end = data.length, seed = 0): number {
  const t = TABLES;
  let crc = ~seed;
  let i = start;
  const last16 = end - 16;
  while (i <= last16) {
    crc = fold16(
      t,
      crc ^
        ((data[i] as number) |
          ((data[i + 1] as number) << 8) |
          ((data[i + 2] as number) << 16) |
          ((data[i + 3] as number) << 24)),
      (data[i + 4] as number) |
        ((data[i + 5] as number) << 8) |
        ((data[i + 6] as number) << 16) |
        ((data[i + 7] as number) << 24),
      (data[i + 8] as number) |
        ((data[i + 9] as number) << 8) |
        ((data[i + 10] as number) << 16) |
        ((data[i + 11] as number) << 24),
      (data[i + 12] as number) |
        ((data[i + 13] as number) << 8) |
        ((data[i + 14] as number) << 16) |
        ((data[i + 15] as number) << 24),
    );
    i += 16;
  }
  while (i < end) {
    crc = (t[(crc ^ (data[i] as number)) & 0xff] as number) ^ (crc >>> 8);
    i++;
  }
  return ~crc >>> 0;
}

const ZERO4 = new Uint8Array(4);

/**
 * The SCTP checksum of a whole packet: CRC32c over the packet with its checksum field (bytes 8..11)
 * taken as zero. The caller stores it little-endian (the byte order every stack uses on the wire).
 */
export function sctpChecksum(packet: Uint8Array): number {
  if (WASM !== undefined && packet.length >= WASM_MIN_BYTES) return WASM.sctpChecksum(packet);
  let c = crc32c(packet, 0, 8);
  c = crc32c(ZERO4, 0, 4, c);
  return crc32c(packet, 12, packet.length, c);
}

/** True when the packet's stored checksum matches its contents. */
export function verifySctpChecksum(packet: Uint8Array): boolean {
  if (packet.length < 12) return false;
  const stored =
    ((packet[8] as number) |
      ((packet[9] as number) << 8) |
      ((packet[10] as number) << 16) |
      ((packet[11] as number) << 24)) >>>
    0;
  return sctpChecksum(packet) === stored;
}

/** Writes the checksum into bytes 8..11 of a finished packet. */
export function writeSctpChecksum(packet: Uint8Array): void {
  const c = sctpChecksum(packet);
  packet[8] = c & 0xff;
  packet[9] = (c >>> 8) & 0xff;
  packet[10] = (c >>> 16) & 0xff;
  packet[11] = c >>> 24;
}
