/**
 * The guard a foreign SCTP stack sits behind: the checks our own endpoint makes before its
 * association reads a byte, plus the inner lengths (error causes, INIT parameters, SACK blocks,
 * FORWARD TSN and AUTH bodies) whose absence killed npm `sctp` (an ABORT with a zero-length cause
 * loops forever, a short AUTH throws). A stack that parses everything itself still gets only
 * datagrams whose every length is consistent.
 */
import { ChunkType, type ParsedPacket, type RawChunk } from './chunk-types.js';
import { CodecError, decodeData, decodeInit, decodeSack, parsePacket } from './codec.js';

/** Checks error causes (ABORT, ERROR): each at least 4 bytes and inside the chunk. */
function checkCauses(c: RawChunk): CodecError | undefined {
  const v = c.value;
  let off = 0;
  while (off < v.length) {
    if (v.length - off < 4) return new CodecError('truncated-cause', `at ${off}`);
    const len = v.readUInt16BE(off + 2);
    if (len < 4 || off + len > v.length)
      return new CodecError('bad-cause-length', `length ${len} at ${off}`);
    off += (len + 3) & ~3;
  }
  return undefined;
}

/** Least value bytes per chunk type (after the 4-byte chunk header), where the RFCs fix one. */
const MIN_VALUE: Partial<Record<number, number>> = {
  [ChunkType.HEARTBEAT]: 4,
  [ChunkType.HEARTBEAT_ACK]: 4,
  [ChunkType.SHUTDOWN]: 4,
  [ChunkType.COOKIE_ECHO]: 1,
  [ChunkType.ECNE]: 4,
  [ChunkType.CWR]: 4,
  // Shared key id, HMAC id and at least one HMAC byte (RFC 4895 §4.2).
  [ChunkType.AUTH]: 5,
  [ChunkType.FORWARD_TSN]: 4,
  [ChunkType.RE_CONFIG]: 4,
};

/** One chunk's inner structure; undefined when it is consistent. */
function checkChunk(c: RawChunk): CodecError | undefined {
  switch (c.type) {
    case ChunkType.DATA: {
      const d = decodeData(c);
      return d instanceof CodecError ? d : undefined;
    }
    case ChunkType.INIT:
    case ChunkType.INIT_ACK: {
      const i = decodeInit(c);
      return i instanceof CodecError ? i : undefined;
    }
    case ChunkType.SACK: {
      const s = decodeSack(c);
      return s instanceof CodecError ? s : undefined;
    }
    case ChunkType.ABORT:
    case ChunkType.ERROR:
      return checkCauses(c);
    case ChunkType.FORWARD_TSN:
      if ((c.value.length - 4) % 4 !== 0)
        return new CodecError('bad-forward-tsn', `${c.value.length} bytes`);
      break;
    default:
      break;
  }
  const min = MIN_VALUE[c.type];
  if (min !== undefined && c.value.length < min)
    return new CodecError('short-chunk', `type ${c.type}: ${c.value.length} bytes`);
  return undefined;
}

/**
 * CRC32c, chunk bounds and the inner lengths of every chunk; an INIT must be alone in its packet
 * with a zero tag (RFC 9260 §8.5.1). Never throws.
 */
export function guardPacket(buf: Buffer): ParsedPacket | CodecError {
  const p = parsePacket(buf);
  if (p instanceof CodecError) return p;
  for (const c of p.chunks) {
    if (c.type === ChunkType.INIT && (p.chunks.length !== 1 || p.vtag !== 0))
      return new CodecError('bad-init-packet', 'INIT bundled or with a non-zero tag');
    const e = checkChunk(c);
    if (e) return e;
  }
  return p;
}
