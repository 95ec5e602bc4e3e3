import type { Protocol } from '../model/model.js';
import type { ServicePortName } from '../model/service-port-name.js';

/** Which Service address a portal captures. */
export type PortalKind = 'cluster-ip' | 'external-ip' | 'load-balancer' | 'node-port';

/**
 * One capture rule in redirect mode: traffic to `ip:port` (any local address when `ip` is null, for
 * node ports) is sent to the proxy socket at `proxyIP:proxyPort`.
 */
export interface Portal {
  /** The Service port; its string form is the iptables comment. */
  service: ServicePortName;
  /** The Service port's protocol. */
  protocol: Protocol;
  /** Which address this is; it decides the rules (external IPs also match local traffic). */
  kind: PortalKind;
  /** The Service address; null for a node port, which is captured on every local address. */
  ip: string | null;
  /** The Service port, or the node port for a node-port portal. */
  port: number;
  /** Where the proxy socket listens ("0.0.0.0" means REDIRECT, anything else DNAT). */
  proxyIP: string;
  /** The port the proxy socket is bound to. */
  proxyPort: number;
}

/**
 * Installs and removes capture rules in redirect mode. The default installs nothing (traffic must
 * reach the proxy port by other means); the iptables implementation owns its own NAT chains.
 */
export interface PortalManager {
  /** Idempotent: opening an open portal is a no-op. Rejects with PortalError. */
  open(portal: Portal): Promise<void>;
  /** Idempotent: closing a closed portal is a no-op. Rejects with PortalError. */
  close(portal: Portal): Promise<void>;
  /** Removes everything a previous run left (the daemon's `--cleanup`, and at start). */
  cleanupLeftovers(): Promise<void>;
}
