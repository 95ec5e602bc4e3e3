import { stringify } from 'yaml';
import type { KubeProxyConfiguration } from './config-schema.js';
import { formatDuration } from './duration.js';

/**
 * The effective configuration as a KubeProxyConfiguration file (`--write-config-to`): what the daemon
 * would run with, defaults included, durations as Go strings, so it can be edited and passed back
 * with `--config`.
 */

/** The v1alpha1 (file) form of `config`. */
export function toExternalConfiguration(config: KubeProxyConfiguration): Record<string, unknown> {
  const d = formatDuration;
  const c = config.conntrack;
  const ext = config.userspaceProxy;
  const nullable = (v: number | null) => (v === null ? null : d(v));
  return {
    ...config,
    iptables: {
      ...config.iptables,
      syncPeriod: d(config.iptables.syncPeriod),
      minSyncPeriod: d(config.iptables.minSyncPeriod),
    },
    conntrack: {
      ...c,
      tcpEstablishedTimeout: nullable(c.tcpEstablishedTimeout),
      tcpCloseWaitTimeout: nullable(c.tcpCloseWaitTimeout),
      udpTimeout: d(c.udpTimeout),
      udpStreamTimeout: d(c.udpStreamTimeout),
    },
    configSyncPeriod: d(config.configSyncPeriod),
    udpIdleTimeout: d(config.udpIdleTimeout),
    userspaceProxy: {
      ...ext,
      drainTimeout: d(ext.drainTimeout),
      tcpIdleTimeout: d(ext.tcpIdleTimeout),
      tcpHalfCloseTimeout: d(ext.tcpHalfCloseTimeout),
      tcpKeepAlive: d(ext.tcpKeepAlive),
      dialTimeouts: ext.dialTimeouts.map(d),
      nodeWaitTimeout: d(ext.nodeWaitTimeout),
    },
  };
}

/** YAML text of {@link toExternalConfiguration}. */
export function configurationYaml(config: KubeProxyConfiguration): string {
  return stringify(toExternalConfiguration(config));
}
