import diagnosticsChannel from 'node:diagnostics_channel';

/**
 * The idler publishes what it does on `node:diagnostics_channel` channels of its own, beside
 * core's (`@userspace-proxy/core/diagnostics`); they cost nothing when nobody subscribes. The daemon
 * turns them into metrics (held now per Service port, NeedPods sent, hold duration, timeouts,
 * evictions, hand-over failures); `Idler.stats()` holds the same as running totals.
 */
export const IDLER_CHANNELS = {
  /** A TCP client was held. {@link IdlerHoldMessage} */
  hold: 'userspace-proxy:idler:hold',
  /** A held TCP client stopped being held, and why. {@link IdlerReleaseMessage} */
  release: 'userspace-proxy:idler:release',
  /** A handed-over client closed before it reached an endpoint. {@link IdlerHandOverFailedMessage} */
  handOverFailed: 'userspace-proxy:idler:hand-over-failed',
  /** Pods were asked for (Event and hook). {@link IdlerNeedPodsMessage} */
  needPods: 'userspace-proxy:idler:need-pods',
  /** A UDP datagram of an idled Service port was dropped (not buffered). {@link IdlerUdpMessage} */
  udpDropped: 'userspace-proxy:idler:udp:dropped',
  /** Buffered UDP datagrams were replayed after endpoints came. {@link IdlerUdpMessage} */
  udpReplayed: 'userspace-proxy:idler:udp:replayed',
} as const;

/** Labels of every idler message. */
export interface IdlerLabels {
  /** The Service port, "ns/name:port". */
  service: string;
  /** "TCP" or "UDP". */
  protocol: 'TCP' | 'UDP';
}

/** A client was held; `held` is how many this Service port holds now (the gauge). */
export interface IdlerHoldMessage extends IdlerLabels {
  held: number;
}

/**
 * Why a client stopped being held: `handed-over` (to the socket's dial), `hold-timeout`,
 * `hold-evicted` (the per-port bound), `client-closed` (it gave up), `closed` (the Idler was
 * closed or the socket went away with nothing to hand over to).
 */
export type IdlerReleaseOutcome =
  | 'handed-over'
  | 'hold-timeout'
  | 'hold-evicted'
  | 'client-closed'
  | 'closed';

/** A client stopped being held: the hold-duration histogram and the outcome counters. */
export interface IdlerReleaseMessage extends IdlerLabels {
  outcome: IdlerReleaseOutcome;
  /** How long it was held, ms. */
  heldMs: number;
  /** How many this Service port still holds (the gauge). */
  held: number;
}

/** A handed-over client closed before it was relayed (every dial failed, or it gave up). */
export interface IdlerHandOverFailedMessage extends IdlerLabels {}

/** Pods were asked for. */
export interface IdlerNeedPodsMessage extends IdlerLabels {
  /** True for a repeat within one idle period (or UDP burst). */
  repeat: boolean;
}

/** UDP datagrams dropped or replayed. */
export interface IdlerUdpMessage extends IdlerLabels {
  datagrams: number;
}

/** The channels, created once. */
export const idlerChannels = {
  hold: diagnosticsChannel.channel(IDLER_CHANNELS.hold),
  release: diagnosticsChannel.channel(IDLER_CHANNELS.release),
  handOverFailed: diagnosticsChannel.channel(IDLER_CHANNELS.handOverFailed),
  needPods: diagnosticsChannel.channel(IDLER_CHANNELS.needPods),
  udpDropped: diagnosticsChannel.channel(IDLER_CHANNELS.udpDropped),
  udpReplayed: diagnosticsChannel.channel(IDLER_CHANNELS.udpReplayed),
} as const;
