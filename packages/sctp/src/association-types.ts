/**
 * The types of an association's surface (state, messages, close information, counters, events)
 * and of its contract with the endpoint that owns it, apart from the state machine itself.
 */

import type { SctpAssociationError } from './errors.js';
import type { InboundMessage } from './reassembly.js';

/** RFC 9260 states, lower-case. */
export type AssociationState =
  | 'cookie-wait'
  | 'cookie-echoed'
  | 'established'
  | 'shutdown-pending'
  | 'shutdown-sent'
  | 'shutdown-received'
  | 'shutdown-ack-sent'
  | 'closed';

/** A message to send: the stream, PPID and U bit travel with it. */
export interface SctpOutboundMessage {
  readonly streamId?: number;
  readonly ppid?: number;
  readonly unordered?: boolean;
  /** Not copied: do not modify it after `send`. */
  readonly data: Buffer;
}

/** A received message. */
export type SctpMessage = InboundMessage;

/** Why an association closed. Only `shutdown` is graceful. */
export type SctpCloseReason =
  | 'shutdown'
  | 'abort-local'
  | 'abort-remote'
  | 'timeout'
  | 'connect-failed'
  | 'protocol-error'
  | 'restart'
  | 'internal-error'
  | 'endpoint-closed';

/** What the 'close' event carries. */
export interface SctpCloseInfo {
  readonly reason: SctpCloseReason;
  /** Human-readable detail (the peer's abort cause, the timer that expired, ...). */
  readonly detail: string;
  /** Set unless `reason` is `shutdown`. */
  readonly error: SctpAssociationError | undefined;
  /** User bytes queued or in flight that were never acknowledged. */
  readonly unsentBytes: number;
}

/** Running totals of one association. */
export interface SctpAssociationCounters {
  packetsIn: number;
  packetsOut: number;
  messagesIn: number;
  messagesOut: number;
  bytesIn: number;
  bytesOut: number;
  retransmits: number;
  fastRetransmits: number;
  timeouts: number;
  duplicateChunks: number;
  droppedChunks: number;
}

/** Fresh, zeroed counters: the one definition both the engine and the foreign-stack adapters use. */
export function zeroAssociationCounters(): SctpAssociationCounters {
  return {
    packetsIn: 0,
    packetsOut: 0,
    messagesIn: 0,
    messagesOut: 0,
    bytesIn: 0,
    bytesOut: 0,
    retransmits: 0,
    fastRetransmits: 0,
    timeouts: 0,
    duplicateChunks: 0,
    droppedChunks: 0,
  };
}

/** Events of an association. */
export interface SctpAssociationEvents {
  message: [SctpMessage];
  drain: [];
  established: [];
  /** The peer started a graceful shutdown (SHUTDOWN received): it sends nothing more. */
  shutdown: [];
  close: [SctpCloseInfo];
}

/** The peer's half of the handshake, from an INIT ACK or a State Cookie. */
export interface PeerParameters {
  readonly peerTag: number;
  readonly peerInitialTsn: number;
  readonly peerRwnd: number;
  readonly outboundStreams: number;
  readonly inboundStreams: number;
}
