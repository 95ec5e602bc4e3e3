import type { Protocol } from '../model/model.js';
import type { ConntrackCleaner } from './conntrack.js';

/**
 * The default {@link ConntrackCleaner}: it does nothing. Clearing kernel connection-tracking entries
 * needs root and the `conntrack` tool, and only matters when NAT rules send traffic to the proxy
 * (redirect mode with an iptables PortalManager); the daemon passes the exec-based cleaner there.
 */
export class NoopConntrackCleaner implements ConntrackCleaner {
  /** Resolves at once: there is nothing to clear without NAT. */
  async clearEntriesForIP(_ip: string, _protocol: Protocol): Promise<void> {}
}
