import diagnosticsChannel from 'node:diagnostics_channel';
import type { Protocol } from './model.js';

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
} as const;

/** Labels shared by every per-Service message. */
export interface ServiceLabels {
  /** The ServicePortName string, "ns/name:port". */
  service: string;
  protocol: Protocol;
}

export interface ConnectionOpenMessage extends ServiceLabels {
  client: string;
  endpoint: string;
}

export interface ConnectionCloseMessage extends ServiceLabels {
  endpoint: string;
  /** Bytes from the client to the endpoint. */
  bytesIn: number;
  /** Bytes from the endpoint to the client. */
  bytesOut: number;
  durationMs: number;
}

export interface DialErrorMessage extends ServiceLabels {
  endpoint: string;
  error: Error;
}

export interface RefusedMessage extends ServiceLabels {
  reason: 'no-endpoints' | 'dial-failed' | 'connection-limit' | 'udp-session-limit' | 'other';
}

export interface UdpSessionMessage extends ServiceLabels {
  client: string;
  endpoint: string;
}

export interface UdpSessionCloseMessage extends UdpSessionMessage {
  datagramsIn: number;
  datagramsOut: number;
  bytesIn: number;
  bytesOut: number;
}

export interface AcceptErrorMessage extends ServiceLabels {
  error: Error;
}

export interface SyncMessage {
  durationMs: number;
  /** Service changes applied by this sync. */
  changes: number;
  /** Proxied service ports after the sync. */
  servicePorts: number;
}

export interface ServiceChangeMessage {
  /** "ns/name" of the Service. */
  service: string;
}

export interface ObjectRejectedMessage {
  kind: string;
  key: string;
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
} as const;
