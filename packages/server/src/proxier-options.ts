import type {
  ConntrackCleaner,
  EventRecorder,
  Logger,
  PortalManager,
  ProxierOptions,
  ProxyMode,
} from '@userspace-proxy/core';
import { effectiveProxyMode, type KubeProxyConfiguration } from './config-schema.js';
import { isUnspecified } from './host-port.js';

/**
 * The translation from a KubeProxyConfiguration to core's ProxierOptions, kept apart from the
 * daemon's lifecycle so the mapping of every field is visible (and tested) in one place.
 */

/** What the daemon supplies besides the configuration. */
export interface ProxierEnvironmentOptions {
  logger: Logger;
  recorder: EventRecorder;
  /** The node's IPs from the source (a cluster's Node object), for "primary". */
  sourceNodeIPs?: string[] | undefined;
  /** Redirect mode only: installs the capture rules. */
  portals?: PortalManager | undefined;
  /** Redirect mode only: removes stale UDP flows. */
  conntrack?: ConntrackCleaner | undefined;
}

/** core's mode for a configuration `mode`: "userspace" is the redirect design, the rest the portal design. */
export function coreProxyMode(config: KubeProxyConfiguration): ProxyMode {
  return effectiveProxyMode(config) === 'userspace' ? 'redirect' : 'service-port-portal';
}

/**
 * The node IPs: a specific `bindAddress` wins (kube-proxy's rule), then the source's, else none
 * (core detects them from the interfaces).
 */
export function nodeIPsFor(
  config: KubeProxyConfiguration,
  sourceNodeIPs?: string[],
): string[] | undefined {
  if (!isUnspecified(config.bindAddress)) return [config.bindAddress];
  return sourceNodeIPs !== undefined && sourceNodeIPs.length > 0 ? sourceNodeIPs : undefined;
}

/**
 * Whether the Proxier's node-port addresses depend on the source's node IPs: `primary` is asked for
 * and no specific `bindAddress` names the node IP. Only then does the daemon wait for the Node at
 * start, and restart when its IPs change.
 */
export function needsSourceNodeIPs(config: KubeProxyConfiguration): boolean {
  return config.nodePortAddresses.includes('primary') && isUnspecified(config.bindAddress);
}

/** ProxierOptions for `config`. */
export function proxierOptionsFor(
  config: KubeProxyConfiguration,
  env: ProxierEnvironmentOptions,
): ProxierOptions {
  const ext = config.userspaceProxy;
  const mode = coreProxyMode(config);
  const nodeIPs = nodeIPsFor(config, env.sourceNodeIPs);
  const options: ProxierOptions = {
    mode,
    listenIP: config.bindAddress,
    portRange: config.portRange,
    nodePortAddresses: [...config.nodePortAddresses],
    syncPeriodMs: config.iptables.syncPeriod,
    minSyncPeriodMs: config.iptables.minSyncPeriod,
    udpIdleTimeoutMs: config.udpIdleTimeout,
    proxySocket: {
      dialTimeoutsMs: [...ext.dialTimeouts],
      maxConnections: ext.maxConnectionsPerPort,
      idleTimeoutMs: ext.tcpIdleTimeout,
      halfCloseTimeoutMs: ext.tcpHalfCloseTimeout,
      keepAliveMs: ext.tcpKeepAlive,
      maxUdpSessions: ext.maxUdpSessionsPerPort,
      udpBufferBytes: ext.udpBufferBytes,
    },
    recorder: env.recorder,
    logger: env.logger,
  };
  if (nodeIPs !== undefined) options.nodeIPs = nodeIPs;
  if (mode === 'redirect' && env.portals !== undefined) options.portals = env.portals;
  if (mode === 'redirect' && env.conntrack !== undefined) options.conntrack = env.conntrack;
  return options;
}
