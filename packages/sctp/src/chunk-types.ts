/**
 * SCTP wire constants (RFC 9260 §3) and the decoded shapes of the chunks the engine acts on. Kept
 * apart from the codec so the association, the guard and the tests share one vocabulary.
 */

/** Chunk type numbers (RFC 9260 §3.2, plus the extensions we recognise only to skip them). */
export const ChunkType = {
  DATA: 0,
  INIT: 1,
  INIT_ACK: 2,
  SACK: 3,
  HEARTBEAT: 4,
  HEARTBEAT_ACK: 5,
  ABORT: 6,
  SHUTDOWN: 7,
  SHUTDOWN_ACK: 8,
  ERROR: 9,
  COOKIE_ECHO: 10,
  COOKIE_ACK: 11,
  ECNE: 12,
  CWR: 13,
  SHUTDOWN_COMPLETE: 14,
  AUTH: 15,
  I_DATA: 64,
  ASCONF_ACK: 128,
  RE_CONFIG: 130,
  PAD: 132,
  FORWARD_TSN: 192,
  ASCONF: 193,
  I_FORWARD_TSN: 194,
} as const;

/** DATA chunk flags. */
export const DataFlags = { END: 0x01, BEGIN: 0x02, UNORDERED: 0x04, IMMEDIATE: 0x08 } as const;

/** The T bit of ABORT and SHUTDOWN COMPLETE: the verification tag is the one the receiver sent. */
export const FLAG_T = 0x01;

/** Error cause codes (RFC 9260 §3.3.10). */
export const CauseCode = {
  INVALID_STREAM: 1,
  MISSING_PARAMETER: 2,
  STALE_COOKIE: 3,
  OUT_OF_RESOURCE: 4,
  UNRESOLVABLE_ADDRESS: 5,
  UNRECOGNIZED_CHUNK: 6,
  INVALID_MANDATORY_PARAMETER: 7,
  UNRECOGNIZED_PARAMETERS: 8,
  NO_USER_DATA: 9,
  COOKIE_WHILE_SHUTTING_DOWN: 10,
  RESTART_WITH_NEW_ADDRESSES: 11,
  USER_INITIATED_ABORT: 12,
  PROTOCOL_VIOLATION: 13,
} as const;

/** INIT / INIT ACK parameter types we read. */
export const ParamType = { HEARTBEAT_INFO: 1, STATE_COOKIE: 7, UNRECOGNIZED_PARAMETER: 8 } as const;

/** Bytes of the common header. */
export const COMMON_HEADER_BYTES = 12;
/** Bytes of a DATA chunk before its user data. */
export const DATA_HEADER_BYTES = 16;

/** One chunk as found in a packet: its value is a view into the datagram, padding excluded. */
export interface RawChunk {
  readonly type: number;
  readonly flags: number;
  readonly value: Buffer;
}

/** A datagram that passed the guard: header fields and the bounds-checked chunk list. */
export interface ParsedPacket {
  readonly srcPort: number;
  readonly dstPort: number;
  readonly vtag: number;
  readonly chunks: readonly RawChunk[];
}

/** DATA (RFC 9260 §3.3.1). `data` is a view into the datagram. */
export interface DataChunk {
  readonly flags: number;
  readonly tsn: number;
  readonly streamId: number;
  readonly ssn: number;
  readonly ppid: number;
  readonly data: Buffer;
}

/** INIT and INIT ACK (RFC 9260 §3.3.2, §3.3.3); `cookie` only in INIT ACK. */
export interface InitChunk {
  readonly initiateTag: number;
  readonly aRwnd: number;
  readonly outboundStreams: number;
  readonly inboundStreams: number;
  readonly initialTsn: number;
  readonly cookie: Buffer | undefined;
}

/** SACK (RFC 9260 §3.3.4). Gap blocks are offsets from `cumTsnAck`, flattened start,end pairs. */
export interface SackChunk {
  readonly cumTsnAck: number;
  readonly aRwnd: number;
  readonly gapBlocks: readonly number[];
  readonly duplicates: number;
}

/** The first error cause of an ABORT or ERROR chunk, enough to report why. */
export interface ErrorCause {
  readonly code: number;
  readonly info: Buffer;
}
