/**
 * Tunables of the engine, every one with its default. Defaults follow RFC 9260 §16 where it gives
 * one; the buffer sizes are chosen for a proxy relaying many associations in one process.
 */

/** Per-association protocol parameters. */
export interface SctpAssociationOptions {
  /** Path MTU of the IP layer in bytes; packets are this less the IP and UDP headers. Default 1500. */
  readonly mtu?: number;
  /** Initial retransmission timeout, ms. Default 1000 (RFC 9260 RTO.Initial). */
  readonly rtoInitial?: number;
  /** Lower bound of the RTO, ms. Default 1000 (RFC 9260 RTO.Min). */
  readonly rtoMin?: number;
  /** Upper bound of the RTO, ms. Default 60000 (RFC 9260 RTO.Max). */
  readonly rtoMax?: number;
  /** INIT / COOKIE ECHO retransmissions before connect fails. Default 8 (Max.Init.Retransmits). */
  readonly maxInitRetransmits?: number;
  /** Consecutive timeouts before the association fails. Default 10 (Association.Max.Retrans). */
  readonly maxRetransmits?: number;
  /** Delayed SACK, ms. Default 200. */
  readonly sackDelay?: number;
  /**
   * Packets with DATA one SACK may cover. A SACK is due for every second such packet (RFC 9260
   * §6.2); it leaves once the datagrams at hand have been read (the end of the event loop's read
   * batch, setImmediate), so the packets of one burst get one SACK instead of one per two, and at
   * once after this many packets however long the batch. 2 sends it right after every second
   * packet, as before. Gaps, duplicates and SHUTDOWN-SENT still get one at once. Default 16.
   */
  readonly maxPacketsPerSack?: number;
  /** Receive window advertised (a_rwnd), bytes. Default 1 MiB. */
  readonly receiveWindow?: number;
  /** Largest message sent or reassembled, bytes; a bigger incoming one aborts. Default 1 MiB. */
  readonly maxMessageBytes?: number;
  /** Buffered send bytes above which `send` returns false (then 'drain'). Default 1 MiB. */
  readonly sendHighWaterMark?: number;
  /** Buffered send bytes beyond which `send` throws. Default sendHighWaterMark + maxMessageBytes. */
  readonly maxSendBufferBytes?: number;
  /** Outbound streams requested. Default 1024. */
  readonly outboundStreams?: number;
  /** Inbound streams accepted. Default 1024. */
  readonly inboundStreams?: number;
  /** TSNs kept above the cumulative point on receive. Default 16384. */
  readonly maxOutOfOrder?: number;
  /** State Cookie lifetime, ms. Default 60000 (Valid.Cookie.Life). */
  readonly cookieLifetime?: number;
  /**
   * HEARTBEAT interval while nothing is outstanding, ms (plus the RTO); unanswered heartbeats count
   * as timeouts, so a silent dead peer closes the association. 0 disables. Default 30000 (HB.interval).
   */
  readonly heartbeatInterval?: number;
}

/** Every option resolved. */
export type ResolvedAssociationOptions = { readonly [K in keyof SctpAssociationOptions]-?: number };

/** Applies the defaults. */
export function resolveAssociationOptions(
  o: SctpAssociationOptions = {},
): ResolvedAssociationOptions {
  const maxMessageBytes = o.maxMessageBytes ?? 1 << 20;
  const sendHighWaterMark = o.sendHighWaterMark ?? 1 << 20;
  const r: ResolvedAssociationOptions = {
    mtu: o.mtu ?? 1500,
    rtoInitial: o.rtoInitial ?? 1000,
    rtoMin: o.rtoMin ?? 1000,
    rtoMax: o.rtoMax ?? 60_000,
    maxInitRetransmits: o.maxInitRetransmits ?? 8,
    maxRetransmits: o.maxRetransmits ?? 10,
    sackDelay: o.sackDelay ?? 200,
    maxPacketsPerSack: o.maxPacketsPerSack ?? 16,
    receiveWindow: o.receiveWindow ?? 1 << 20,
    maxMessageBytes,
    sendHighWaterMark,
    maxSendBufferBytes: o.maxSendBufferBytes ?? sendHighWaterMark + maxMessageBytes,
    outboundStreams: o.outboundStreams ?? 1024,
    inboundStreams: o.inboundStreams ?? 1024,
    maxOutOfOrder: o.maxOutOfOrder ?? 16384,
    cookieLifetime: o.cookieLifetime ?? 60_000,
    heartbeatInterval: o.heartbeatInterval ?? 30_000,
  };
  for (const [k, v] of Object.entries(r)) {
    if (!Number.isFinite(v) || v < 0)
      throw new RangeError(`SCTP option ${k} must be a non-negative number, got ${v}`);
  }
  if (r.maxPacketsPerSack < 2 || !Number.isInteger(r.maxPacketsPerSack))
    throw new RangeError(
      `SCTP option maxPacketsPerSack must be an integer of 2 or more, got ${r.maxPacketsPerSack}`,
    );
  if (r.mtu < 576 || r.mtu > 65535)
    throw new RangeError(`SCTP option mtu must be within 576..65535, got ${r.mtu}`);
  if (
    r.outboundStreams < 1 ||
    r.outboundStreams > 65535 ||
    r.inboundStreams < 1 ||
    r.inboundStreams > 65535
  ) {
    throw new RangeError('SCTP stream counts must be within 1..65535');
  }
  return r;
}
