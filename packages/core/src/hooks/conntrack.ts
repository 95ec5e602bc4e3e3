import type { Protocol } from '../model/model.js';

/**
 * Removes kernel connection-tracking entries for a Service address, so that a UDP client of a removed
 * Service port does not keep a stale NAT mapping to a proxy port that will be reused. Called by the
 * Proxier after a UDP Service port is removed, once per address (cluster, external, load-balancer IP).
 */
export interface ConntrackCleaner {
  /** Resolves when done; "nothing to delete" is success. Rejects with ConntrackError. */
  clearEntriesForIP(ip: string, protocol: Protocol): Promise<void>;
}
