import type { Portal, PortalManager } from './portal-manager.js';

/**
 * The default {@link PortalManager} of redirect mode: it installs no capture rule. Traffic reaches the
 * proxy sockets only when something else sends it there (your own rules, a sidecar, a client that
 * connects to `listenIP:proxyPort` directly), or through the node-port listeners, which serve for
 * real. Use the iptables PortalManager where the proxy may own NAT rules.
 */
export class NoopPortalManager implements PortalManager {
  /** Resolves at once: nothing to install. */
  async open(_portal: Portal): Promise<void> {}
  /** Resolves at once: nothing to remove. */
  async close(_portal: Portal): Promise<void> {}
  /** Resolves at once: a no-op manager never leaves anything behind. */
  async cleanupLeftovers(): Promise<void> {}
}
