import diagnosticsChannel from 'node:diagnostics_channel';
import type { Protocol } from './model/model.js';

/**
 * Making input-derived text safe to log (escaped control characters, a bound on length): what core
 * applies to everything it logs or puts in an Event from input, exported for the daemon and
 * embedders that log input themselves.
 */
export {
  LOG_MESSAGE_MAX_CHARS,
  LOG_VALUE_MAX_CHARS,
  logSafe,
  quoteForLog,
} from './model/log-safe.js';

/**
 * Core publishes what happens on `node:diagnostics_channel` channels, which cost nothing when nobody
 * subscribes. The daemon turns them into Prometheus metrics; integrators may subscribe too. Names and
 * message shapes are part of the public API (docs/api.md).
 */
export const CHANNELS = {
  /** A TCP/SCTP connection was accepted and its endpoint dialled. {@link ConnectionOpenMessage} */
  connectionOpen: 'userspace-proxy:connection:open',
  /** A proxied connection ended. {@link ConnectionCloseMessage} */
  connectionClose: 'userspace-proxy:connection:close',
  /** One dial attempt to an endpoint failed. {@link DialErrorMessage} */
  dialError: 'userspace-proxy:dial:error',
  /** A client was refused: no endpoint, every dial failed, or a limit. {@link RefusedMessage} */
  refused: 'userspace-proxy:refused',
  /** A UDP session started. {@link UdpSessionMessage} */
  udpSessionOpen: 'userspace-proxy:udp:session:open',
  /** A UDP session ended. {@link UdpSessionCloseMessage} */
  udpSessionClose: 'userspace-proxy:udp:session:close',
  /** accept() failed (EMFILE and friends); accepting pauses. {@link AcceptErrorMessage} */
  acceptError: 'userspace-proxy:accept:error',
  /** A sync finished. {@link SyncMessage} */
  sync: 'userspace-proxy:sync',
  /** A change to a Service was recorded and awaits a sync. {@link ServiceChangeMessage} */
  serviceChange: 'userspace-proxy:service:change',
  /** An object from a source was malformed and ignored. {@link ObjectRejectedMessage} */
  objectRejected: 'userspace-proxy:object:rejected',
  /**
   * A relayed socket could not use the copy-free read path and fell back to a slower one (a Node
   * upgrade that moved net.Socket's internals, an injected `connect` that drops `onread`).
   * {@link RelayFallbackMessage}
   */
  relayFallback: 'userspace-proxy:relay:fallback',
} as const;

/** Labels shared by every per-Service message. */
export interface ServiceLabels {
  /** The ServicePortName string, "ns/name:port". */
  service: string;
  /** The Service port's protocol. */
  protocol: Protocol;
}

/** A proxied connection started: its client was accepted and its endpoint dialled. */
export interface ConnectionOpenMessage extends ServiceLabels {
  /** The client, "ip:port" as the proxy socket saw it. */
  client: string;
  /** The endpoint dialled, "ip:port". */
  endpoint: string;
}

/** A proxied connection ended, with what it carried: the daemon's byte and duration metrics. */
export interface ConnectionCloseMessage extends ServiceLabels {
  /** The endpoint it was relayed to, "ip:port". */
  endpoint: string;
  /** Bytes from the client to the endpoint. */
  bytesIn: number;
  /** Bytes from the endpoint to the client. */
  bytesOut: number;
  /** From accept to the close of both legs. */
  durationMs: number;
}

/** One dial attempt failed; the next endpoint is tried unless the attempts are used up. */
export interface DialErrorMessage extends ServiceLabels {
  /** The endpoint that could not be reached, "ip:port". */
  endpoint: string;
  /** Why (a timeout, ECONNREFUSED…). */
  error: Error;
}

/** A client was turned away, and why: the daemon counts refusals per reason. */
export interface RefusedMessage extends ServiceLabels {
  /** No endpoint, every dial failed, a connection or session limit, or anything else. */
  reason:
    | 'no-endpoints'
    | 'dial-failed'
    | 'connection-limit'
    | 'udp-session-limit'
    | 'source-range'
    | 'policy'
    | 'other';
  /** For `policy`: the reason the accept policy gave (an idler's `hold-timeout`, say). */
  detail?: string;
}

/**
 * How a relayed socket reads: `in-place` is the copy-free path (the accepted socket switched to
 * the relay's buffers), `moved-handle` the same path at the cost of one more socket object,
 * `data-events` Node's ordinary reads (a Buffer per read).
 */
export type RelayReadPath = 'in-place' | 'moved-handle' | 'data-events';

/** A relayed socket fell back from the copy-free read path. */
export interface RelayFallbackMessage {
  /** Which leg: the accepted client or the dialled endpoint. */
  leg: 'client' | 'endpoint';
  /** The path it got instead. */
  path: Exclude<RelayReadPath, 'in-place'>;
}

/** A UDP session started: a new client "ip:port" got an upstream socket to an endpoint. */
export interface UdpSessionMessage extends ServiceLabels {
  /** The client, "ip:port". */
  client: string;
  /** The endpoint chosen for the session, "ip:port". */
  endpoint: string;
}

/** A UDP session ended (idle timeout, close, limit), with what it carried. */
export interface UdpSessionCloseMessage extends UdpSessionMessage {
  /** Datagrams from the client to the endpoint. */
  datagramsIn: number;
  /** Datagrams from the endpoint to the client. */
  datagramsOut: number;
  /** Bytes from the client to the endpoint. */
  bytesIn: number;
  /** Bytes from the endpoint to the client. */
  bytesOut: number;
}

/** accept() failed on a listener (EMFILE, ENFILE…); accepting pauses and backs off. */
export interface AcceptErrorMessage extends ServiceLabels {
  /** The error accept() gave. */
  error: Error;
}

/** A Proxier sync finished: the daemon's sync duration metric. */
export interface SyncMessage {
  /** How long the sync took, on the Proxier's monotonic clock. */
  durationMs: number;
  /** Service changes applied by this sync. */
  changes: number;
  /** Proxied service ports after the sync. */
  servicePorts: number;
}

/** A Service change was recorded; it is applied by the next sync. */
export interface ServiceChangeMessage {
  /** "ns/name" of the Service. */
  service: string;
}

/** A malformed object from a source was ignored: the daemon counts rejections per kind. */
export interface ObjectRejectedMessage {
  /** "Service", "Endpoints", "EndpointSlice", or a source's own kind. */
  kind: string;
  /** "ns/name", or "<unknown>" for an object without a usable name. */
  key: string;
  /** What is wrong, with field paths (InvalidObjectError.reason). */
  reason: string;
}

/** The channels, created once; `hasSubscribers` makes publishing free when nobody listens. */
export const channels = {
  connectionOpen: diagnosticsChannel.channel(CHANNELS.connectionOpen),
  connectionClose: diagnosticsChannel.channel(CHANNELS.connectionClose),
  dialError: diagnosticsChannel.channel(CHANNELS.dialError),
  refused: diagnosticsChannel.channel(CHANNELS.refused),
  udpSessionOpen: diagnosticsChannel.channel(CHANNELS.udpSessionOpen),
  udpSessionClose: diagnosticsChannel.channel(CHANNELS.udpSessionClose),
  acceptError: diagnosticsChannel.channel(CHANNELS.acceptError),
  sync: diagnosticsChannel.channel(CHANNELS.sync),
  serviceChange: diagnosticsChannel.channel(CHANNELS.serviceChange),
  objectRejected: diagnosticsChannel.channel(CHANNELS.objectRejected),
  relayFallback: diagnosticsChannel.channel(CHANNELS.relayFallback),
} as const;
