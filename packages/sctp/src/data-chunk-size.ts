/**
 * The sizes of DATA chunks in packets: padded sizes for the room check, the fragment size for an
 * MTU, and the write that must not be refused. One place, because a mismatch between them stalled
 * associations (see maxFragmentBytes).
 */
import type { DataChunk } from './chunk-types.js';
import type { PacketWriter } from './codec.js';

/**
 * Bytes a DATA chunk takes in a packet: its 16-byte header and data, padded to 4 bytes (RFC 9260
 * §3.2). The room check must use the padded size: a chunk that fits unpadded but not padded is
 * refused by the packet writer.
 */
export function chunkBytes(c: DataChunk): number {
  return (c.data.length + 16 + 3) & ~3;
}

/**
 * Writes `c` into `w`, which the caller checked has room for it. A refusal here would leave a
 * chunk counted as sent that never went out (a stall until the T3 timer, or for ever if it can
 * never fit): it is an internal error, which aborts the association loudly.
 */
export function put(w: PacketWriter, c: DataChunk): void {
  if (!w.data(c.flags, c.tsn, c.streamId, c.ssn, c.ppid, c.data)) {
    throw new Error(`DATA chunk of ${c.data.length} bytes does not fit an empty packet`);
  }
}

/**
 * Bytes of user data per DATA fragment for packets of `packetBytes` (the path MTU less the IP
 * and UDP headers): the packet less the common and DATA headers, rounded down to a multiple of 4
 * so a full fragment with its padding still fits. (An MTU such as 1450, VXLAN's, left 1394:
 * padded to 1396, a full fragment never fitted and every message larger than one stalled.)
 */
export function maxFragmentBytes(packetBytes: number): number {
  return (packetBytes - 12 - 16) & ~3;
}
