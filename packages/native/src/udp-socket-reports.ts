/**
 * What a native UDP socket publishes and logs, with the messages core's UDP socket uses: the
 * `refused`, `dialError`, `udpSessionOpen` and `udpSessionClose` channels, and refusals logged
 * through a {@link LogLimiter} so a flood of dropped datagrams costs a line a second, not one each.
 */
import type { Logger } from '@userspace-proxy/core';
import {
  channels,
  type DialErrorMessage,
  type RefusedMessage,
  type UdpSessionCloseMessage,
  type UdpSessionMessage,
} from '@userspace-proxy/core/diagnostics';
import { LogLimiter } from '@userspace-proxy/core/sockets';
import type { UdpSessionTotals } from './udp-protocol.js';

/** See the module comment. */
export class UdpSocketReports {
  readonly #name: string;
  readonly #log: Logger;
  readonly #refusalLog = new LogLimiter();
  readonly #queueFullLog = new LogLimiter();

  /** `name` is the Service port's "namespace/name:port". */
  constructor(name: string, log: Logger) {
    this.#name = name;
    this.#log = log;
  }

  /** A datagram (or a new client's first) turned away: published and logged. */
  refuse(reason: RefusedMessage['reason'], detail: string): void {
    this.publishRefused(reason);
    this.logRefusal(reason, detail);
  }

  /** Logs a refusal, rate limited; no endpoints is routine (debug), the rest a warning. */
  logRefusal(reason: RefusedMessage['reason'], detail: string): void {
    const suppressed = this.#refusalLog.take();
    if (suppressed < 0) return;
    const more = suppressed > 0 ? ` (${suppressed} more dropped since the last report)` : '';
    const line = `dropping a datagram for ${this.#name} (${reason}): ${detail}${more}`;
    if (reason === 'no-endpoints') this.#log.debug(line);
    else this.#log.warn(line);
  }

  /**
   * Datagrams of new clients the helper dropped while they waited (a session's queue, or its
   * output to a busy Node, full): a warning, rate limited; the factory counts them
   * (`droppedQueueFull`, the daemon's `native_udp_dropped_total{reason="queue-full"}`).
   */
  logQueueFull(n: number): void {
    const suppressed = this.#queueFullLog.take();
    if (suppressed < 0) return;
    const more = suppressed > 0 ? ` (and ${suppressed} report(s) since the last line)` : '';
    this.#log.warn(
      `${this.#name}: the native helper dropped ${n} datagram(s) of new clients waiting for Node${more}`,
    );
  }

  /** One datagram refused, on `refused` (what the daemon counts per reason). */
  publishRefused(reason: RefusedMessage['reason']): void {
    if (!channels.refused.hasSubscribers) return;
    const message: RefusedMessage = { service: this.#name, protocol: 'UDP', reason };
    channels.refused.publish(message);
  }

  /** An endpoint that could not be used for a session (invalid, or its socket failed). */
  dialError(endpoint: string, error: Error): void {
    if (!channels.dialError.hasSubscribers) return;
    const message: DialErrorMessage = { service: this.#name, protocol: 'UDP', endpoint, error };
    channels.dialError.publish(message);
  }

  sessionOpened(client: string, endpoint: string): void {
    if (!channels.udpSessionOpen.hasSubscribers) return;
    const message: UdpSessionMessage = { service: this.#name, protocol: 'UDP', client, endpoint };
    channels.udpSessionOpen.publish(message);
  }

  /** A session ended with the helper's counts (none when it never relayed). */
  sessionClosed(
    session: { readonly client: string; readonly endpoint: string },
    totals: UdpSessionTotals | undefined,
  ): void {
    if (!channels.udpSessionClose.hasSubscribers) return;
    const message: UdpSessionCloseMessage = {
      service: this.#name,
      protocol: 'UDP',
      client: session.client,
      endpoint: session.endpoint,
      datagramsIn: totals?.datagramsIn ?? 0,
      datagramsOut: totals?.datagramsOut ?? 0,
      bytesIn: totals?.bytesIn ?? 0,
      bytesOut: totals?.bytesOut ?? 0,
    };
    channels.udpSessionClose.publish(message);
  }
}
