/**
 * The SCTP engine contract the proxy socket is written against, so the userspace engine here can
 * be swapped (a kernel-SCTP backend on hosts that have one, an adapter for another stack) without
 * touching the proxy. Implementations: {@link createUserspaceSctpEngine} (the default).
 */
import type { EventEmitter } from 'eventemitter3';
import type {
  AssociationState,
  SctpAssociationCounters,
  SctpAssociationEvents,
  SctpCloseInfo,
  SctpOutboundMessage,
} from './association-types.js';
import type { SctpAssociationOptions } from './options.js';

/** The RFC 6951 default UDP port for SCTP over UDP. */
export const DEFAULT_ENCAPSULATION_PORT = 9899;

/** Where and how to accept associations. */
export interface SctpListenOptions {
  /** Local IP address to bind (the UDP socket is shared by every SCTP port on this address and UDP port). */
  readonly address: string;
  /** SCTP port; 0 picks a free one. */
  readonly port: number;
  /** Local UDP port of the encapsulation. Default {@link DEFAULT_ENCAPSULATION_PORT}. */
  readonly encapsulationPort?: number;
  /** Associations this listener keeps at once; more are refused with an ABORT. Default 1024. */
  readonly maxAssociations?: number;
  /**
   * Associations one peer IP address (any of its ports) keeps on this listener; more are refused
   * like those past `maxAssociations`. Default: `maxAssociations` (no separate bound), because
   * clients behind one NAT share an address; set it lower where peers are not behind NAT.
   */
  readonly maxAssociationsPerAddress?: number;
  /** Per-association parameters of accepted associations (engine defaults otherwise). */
  readonly association?: SctpAssociationOptions;
}

/** Where and how to connect. */
export interface SctpConnectOptions {
  /** Peer IP address. */
  readonly address: string;
  /** Peer SCTP port. */
  readonly port: number;
  /** Peer's UDP encapsulation port. Default {@link DEFAULT_ENCAPSULATION_PORT}; learned afterwards. */
  readonly encapsulationPort?: number;
  /** Local address to bind. Default the wildcard of the peer's family. */
  readonly localAddress?: string;
  /** Local UDP port. Default 0: one ephemeral UDP port shared by the engine's outgoing associations. */
  readonly localEncapsulationPort?: number;
  /** Local SCTP port. Default: a free one in 49152..65535. */
  readonly localPort?: number;
  /**
   * Gives the association a UDP socket of its own, connected to the peer's address and
   * encapsulation port, instead of the shared ephemeral one: each packet sent costs about a third
   * less (the kernel keeps the route, Node skips its per-send address lookup), for one file
   * descriptor per association. The peer must answer from the UDP port it is sent to (RFC 6951
   * stacks do: they send from their tunneling port); the kernel drops anything from another port.
   * Ignored with `localEncapsulationPort`, and by engines without UDP sockets (raw). Default false.
   */
  readonly connectedSocket?: boolean;
  /** Aborts the attempt (and the association if it is still being set up). */
  readonly signal?: AbortSignal;
  /** Per-association parameters (engine defaults otherwise). */
  readonly association?: SctpAssociationOptions;
}

/** One association, whichever engine made it. */
export interface SctpAssociation extends EventEmitter<SctpAssociationEvents> {
  readonly state: AssociationState;
  readonly localAddress: string;
  readonly localPort: number;
  readonly localEncapsulationPort: number;
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly remoteEncapsulationPort: number;
  /** Negotiated outbound streams: `send` accepts stream ids below this. */
  readonly outboundStreams: number;
  /** Negotiated inbound streams. */
  readonly inboundStreams: number;
  /** User bytes queued or unacknowledged (backpressure is computed from this). */
  readonly bufferedAmount: number;
  readonly counters: Readonly<SctpAssociationCounters>;
  /** Set once closed. */
  readonly closeInfo: SctpCloseInfo | undefined;
  /** True while delivery is paused. */
  readonly isPaused: boolean;
  /** Queues a message; false means wait for 'drain'. Throws coded errors for misuse. */
  send(message: SctpOutboundMessage): boolean;
  /** Stops 'message' events; the receive window closes as messages queue. */
  pause(): void;
  /** Restarts 'message' events. */
  resume(): void;
  /** Graceful close after everything queued is acknowledged. */
  shutdown(): void;
  /** Immediate close with an ABORT to the peer. */
  abort(reason?: string): void;
}

/** Events of a listener. */
export interface SctpListenerEvents {
  association: [SctpAssociation];
}

/** Accepts associations on one SCTP port. */
export interface SctpListener extends EventEmitter<SctpListenerEvents> {
  readonly address: string;
  readonly port: number;
  readonly encapsulationPort: number;
  /** Associations accepted here and still open. */
  readonly associationCount: number;
  /** Stops accepting; open associations stay up (as `net.Server.close`). */
  close(): Promise<void>;
}

/** The engine. */
export interface SctpEngine {
  listen(options: SctpListenOptions): Promise<SctpListener>;
  /** Resolves once the association is established; rejects with `ERR_SCTP_CONNECT`. */
  connect(options: SctpConnectOptions): Promise<SctpAssociation>;
  /** Aborts every association and closes every socket. */
  close(): Promise<void>;
}
