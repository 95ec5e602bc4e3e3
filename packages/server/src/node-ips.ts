import { componentLogger, detectPrimaryIPs, type Logger } from '@userspace-proxy/core';
import type { KubeProxyConfiguration } from './config-schema.js';
import { formatDuration } from './duration.js';
import { needsSourceNodeIPs, nodeIPsFor } from './proxier-options.js';
import type { ProxySources } from './sources.js';

/**
 * The node IPs behind `nodePortAddresses: [primary]` on a cluster. Core resolves node-port addresses
 * once, when the Proxier is built, so the daemon must know the Node's IPs by then: it waits for the
 * Node (bounded by `userspaceProxy.nodeWaitTimeout`), and afterwards restarts, as it does for a
 * changed configuration file, when the Node's IPs no longer match the ones it serves on.
 */

/** What {@link sourceNodeIPs} needs. */
export interface NodeIPsOptions {
  config: KubeProxyConfiguration;
  sources: ProxySources;
  nodeName: string;
  /** The daemon's lifetime: aborting it ends the wait, and the Node watch the wait started. */
  signal: AbortSignal;
  logger: Logger;
  /** Where core would look without node IPs; default its `detectPrimaryIPs`. For the log line. */
  detectIPs?: () => string[];
}

/**
 * The source's node IPs for the Proxier, or undefined to let core detect them from the interfaces.
 * When `primary` depends on them and the source can wait for its Node (a cluster), waits up to
 * `userspaceProxy.nodeWaitTimeout` for it first, logging what it waits for and, when the Node does
 * not come (or has no IP), which detected addresses are used instead.
 */
export async function sourceNodeIPs(options: NodeIPsOptions): Promise<string[] | undefined> {
  const { config, sources, nodeName, signal } = options;
  const current = () => {
    const ips = sources.nodeIPs?.() ?? [];
    return ips.length > 0 ? ips : undefined;
  };
  if (!needsSourceNodeIPs(config) || !sources.waitForNode || current() !== undefined) {
    return current();
  }
  const log = componentLogger(options.logger, 'node-ips');
  const timeout = config.userspaceProxy.nodeWaitTimeout;
  let seen = false;
  if (timeout > 0) {
    log.info(
      `waiting up to ${formatDuration(timeout)} for Node ${nodeName}: its IPs are where "primary" node ports are served`,
    );
    seen = await sources.waitForNode(signal, timeout);
  }
  const ips = current();
  if (ips === undefined && !signal.aborted) {
    const why = seen
      ? `Node ${nodeName} has no InternalIP or ExternalIP`
      : `Node ${nodeName} was not seen${timeout > 0 ? ` within ${formatDuration(timeout)}` : ''}`;
    const detected = (options.detectIPs ?? detectPrimaryIPs)().join(', ') || 'none';
    log.warn(
      `${why}; "primary" node ports are served on the addresses detected from the interfaces (${detected}) until its IPs are known, then the daemon restarts if they differ`,
    );
  }
  return ips;
}

/** What {@link watchNodeIPs} needs. */
export interface WatchNodeIPsOptions {
  config: KubeProxyConfiguration;
  sources: ProxySources;
  /** The node IPs the Proxier was built with (the detected ones when the source had none). */
  used: readonly string[];
  logger: Logger;
  /** Called once when the Node's IPs differ from `used`; the daemon stops with exit code 1. */
  restart: (reason: string) => void;
}

/**
 * Follows the Node after the Proxier was built and calls `restart` when its IPs differ from the ones
 * node ports are served on. A Node that disappears, or loses its addresses, changes nothing: the last
 * known addresses keep serving, as the rest of the last known state does. Returns the remover.
 */
export function watchNodeIPs(options: WatchNodeIPsOptions): () => void {
  const { config, sources } = options;
  if (!needsSourceNodeIPs(config) || !sources.onNodeChange) return () => {};
  const log = componentLogger(options.logger, 'node-ips');
  const key = (ips: readonly string[]) => [...ips].sort().join(',');
  const used = key(options.used);
  let restarting = false;
  return sources.onNodeChange(() => {
    const next = nodeIPsFor(config, sources.nodeIPs?.());
    if (restarting || next === undefined || key(next) === used) return;
    restarting = true;
    log.warn(
      `the node IPs are now ${next.join(', ')}, not ${options.used.join(', ') || 'none'}; restarting so that "primary" node ports follow them`,
    );
    options.restart('node IPs changed');
  });
}
