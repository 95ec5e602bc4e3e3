/**
 * Errors of the SCTP package, each with a stable `code` (on core's {@link ProxyError}, so the
 * daemon's logging and `ProxyError.isProxyError` treat them like core's).
 */
import { ProxyError } from '@userspace-proxy/core';

/** Base of every SCTP error. */
export class SctpError extends ProxyError {}

/** `send` on an association that is not established (closed, shutting down, or not yet up). */
export class SctpNotWritableError extends SctpError {
  constructor(state: string) {
    super('ERR_SCTP_NOT_WRITABLE', `SCTP association is ${state}; it accepts no new messages`);
  }
}

/** `send` with a stream id the peer did not grant (at or above the negotiated outbound streams). */
export class SctpInvalidStreamError extends SctpError {
  constructor(streamId: number, streams: number) {
    super(
      'ERR_SCTP_INVALID_STREAM',
      `stream ${streamId} is not below the ${streams} outbound stream(s) negotiated`,
    );
  }
}

/** `send` of an empty message or one larger than `maxMessageBytes`. */
export class SctpMessageSizeError extends SctpError {
  constructor(bytes: number, max: number) {
    super('ERR_SCTP_MESSAGE_SIZE', `SCTP message of ${bytes} byte(s) is not within 1..${max}`);
  }
}

/** `send` although the send buffer is past its hard limit: the caller ignored `false` and 'drain'. */
export class SctpSendBufferFullError extends SctpError {
  constructor(buffered: number, max: number) {
    super(
      'ERR_SCTP_SEND_BUFFER_FULL',
      `SCTP send buffer holds ${buffered} byte(s), hard limit ${max}; wait for 'drain'`,
    );
  }
}

/** The association could not be set up (INIT or COOKIE ECHO unanswered, refused, or aborted). */
export class SctpConnectError extends SctpError {
  constructor(target: string, reason: string, options?: { cause?: unknown }) {
    super('ERR_SCTP_CONNECT', `SCTP association to ${target} failed: ${reason}`, options);
  }
}

/** The association ended other than by a graceful shutdown; `reason` is the close reason. */
export class SctpAssociationError extends SctpError {
  readonly reason: string;
  constructor(reason: string, detail: string) {
    super('ERR_SCTP_ASSOCIATION', `SCTP association ${reason}: ${detail}`);
    this.reason = reason;
  }
}

/** A limit (associations per endpoint) refused a new association. */
export class SctpLimitError extends SctpError {
  constructor(what: string, limit: number) {
    super('ERR_SCTP_LIMIT', `SCTP ${what} limit of ${limit} reached`);
  }
}
