/**
 * The contract between the foreign-stack wrapper (engine-foreign.ts) and a stack's driver
 * (engine-werift.ts, engine-npm-sctp.ts), and the wrapper's options and counters.
 */
import type { SctpCloseReason, SctpMessage, SctpOutboundMessage } from '../index.js';

/** What a stack driver reports to its association. */
export interface ForeignHost {
  /** One SCTP packet to the peer. */
  output(packet: Buffer): void;
  established(outboundStreams: number, inboundStreams: number): void;
  message(m: SctpMessage): void;
  /** Some queued bytes were accepted by the stack (lowers bufferedAmount by `bytes`). */
  sent(bytes: number): void;
  closed(reason: SctpCloseReason, detail: string): void;
}

/** One association of the foreign stack. Every method may throw: the engine contains it. */
export interface ForeignDriver {
  /** A packet from the peer; a returned promise's rejection is contained like a throw. */
  input(packet: Buffer): unknown;
  send(m: SctpOutboundMessage): void;
  shutdown(): void;
  abort(): void;
}

/** A foreign stack. */
export interface ForeignStack {
  readonly name: string;
  /** Starts an association that sends INIT. */
  client(host: ForeignHost, localPort: number, remotePort: number): ForeignDriver;
  /** An association for a peer whose INIT (the first packet passed to `input`) just arrived. */
  server(host: ForeignHost, localPort: number, remotePort: number): ForeignDriver;
}

/** Options of the wrapper. */
export interface ForeignEngineOptions {
  /** CRC32c and chunk bounds checked before the stack sees a packet. Default true. */
  readonly guard?: boolean;
  /** `send` returns false at or above this many queued bytes. Default 1 MiB. */
  readonly sendHighWaterMark?: number;
}

/** Refusals and contained exceptions of one engine (all its sockets). */
export interface ForeignEngineCounters {
  refused: Record<string, number>;
  exceptions: number;
}
