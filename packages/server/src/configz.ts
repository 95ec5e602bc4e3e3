import type { KubeProxyConfiguration } from './config-schema.js';
import { formatDuration } from './duration.js';

/**
 * The /configz body, kube-proxy's shape: `{"kubeproxy.config.k8s.io": <internal config>}`, where the
 * internal type has Go field names as keys ("BindAddress", "ClientConnection": {"QPS": 5}) and
 * durations as Go strings ("30s", "15m0s"), except `logging`, which keeps its JSON names as in
 * kube-proxy. Tools written against kube-proxy's /configz read ours the same way.
 */

/** Keys whose Go name is not simply the JSON name capitalised. */
const GO_NAMES: Readonly<Record<string, string>> = {
  qps: 'QPS',
  iptables: 'IPTables',
  ipvs: 'IPVS',
  nftables: 'NFTables',
  winkernel: 'Winkernel',
  oomScoreAdj: 'OOMScoreAdj',
  udpIdleTimeout: 'UDPIdleTimeout',
  clusterCIDR: 'ClusterCIDR',
  tcpEstablishedTimeout: 'TCPEstablishedTimeout',
  tcpCloseWaitTimeout: 'TCPCloseWaitTimeout',
  tcpBeLiberal: 'TCPBeLiberal',
  udpTimeout: 'UDPTimeout',
  udpStreamTimeout: 'UDPStreamTimeout',
  maxUdpSessionsPerPort: 'MaxUDPSessionsPerPort',
  tcpIdleTimeout: 'TCPIdleTimeout',
  tcpHalfCloseTimeout: 'TCPHalfCloseTimeout',
  tcpKeepAlive: 'TCPKeepAlive',
  udpBufferBytes: 'UDPBufferBytes',
  sctpEncapsulationPort: 'SCTPEncapsulationPort',
  sctpMaxAssociationsPerPort: 'SCTPMaxAssociationsPerPort',
  sctpMaxAssociationsPerAddress: 'SCTPMaxAssociationsPerAddress',
  sctpMtu: 'SCTPMTU',
  sctpTransport: 'SCTPTransport',
  dataPath: 'DataPath',
  detectLocal: 'DetectLocal',
};

/** The fields (by JSON path) that hold milliseconds and print as Go durations. */
const DURATIONS: ReadonlySet<string> = new Set([
  'iptables.syncPeriod',
  'iptables.minSyncPeriod',
  'conntrack.tcpEstablishedTimeout',
  'conntrack.tcpCloseWaitTimeout',
  'conntrack.udpTimeout',
  'conntrack.udpStreamTimeout',
  'configSyncPeriod',
  'udpIdleTimeout',
  'userspaceProxy.drainTimeout',
  'userspaceProxy.tcpIdleTimeout',
  'userspaceProxy.tcpHalfCloseTimeout',
  'userspaceProxy.tcpKeepAlive',
  'userspaceProxy.dialTimeouts',
  'userspaceProxy.nodeWaitTimeout',
  'userspaceProxy.idlingHoldTimeout',
  'userspaceProxy.listLimits.requestTimeout',
  'userspaceProxy.listLimits.requestDeadline',
]);

function goName(key: string): string {
  return GO_NAMES[key] ?? key.charAt(0).toUpperCase() + key.slice(1);
}

function convert(value: unknown, path: string): unknown {
  if (DURATIONS.has(path)) {
    if (typeof value === 'number') return formatDuration(value);
    if (Array.isArray(value))
      return value.map((v) => (typeof v === 'number' ? formatDuration(v) : v));
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value)) {
    const childPath = path === '' ? key : `${path}.${key}`;
    // Opaque sections (ipvs, nftables, winkernel) and maps (featureGates) keep their own keys.
    const opaque =
      path === 'featureGates' || path === 'ipvs' || path === 'nftables' || path === 'winkernel';
    out[opaque ? key : goName(key)] = opaque ? child : convert(child, childPath);
  }
  return out;
}

/** The internal-type view of `config`, as kube-proxy's /configz shows it. */
export function toInternalConfiguration(config: KubeProxyConfiguration): Record<string, unknown> {
  const { apiVersion: _apiVersion, kind: _kind, logging, ...rest } = config;
  const internal = convert(rest, '') as Record<string, unknown>;
  return { ...internal, Logging: logging };
}

/** The /configz JSON body. */
export function configzBody(config: KubeProxyConfiguration): string {
  return JSON.stringify({ 'kubeproxy.config.k8s.io': toInternalConfiguration(config) });
}
