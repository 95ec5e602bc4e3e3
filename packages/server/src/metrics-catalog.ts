import type { RefusedMessage } from '@userspace-proxy/core/diagnostics';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { VERSION } from './version.js';

/**
 * Every metric the daemon exposes, defined in one place: kube-proxy's names, help strings ("[ALPHA] "
 * included) and bucket layouts where a kube-proxy metric means the same thing, so existing
 * dashboards and alerts work; `userspace_proxy_*` for what only a userspace proxy has.
 * docs/operations.md lists them.
 */

const ALPHA = '[ALPHA] ';
/** kube-proxy's sync buckets: 0.001 × 2^k, 15 buckets. */
const SYNC_BUCKETS = Array.from({ length: 15 }, (_, k) => 0.001 * 2 ** k);
/** kube-proxy's network programming buckets (0.25 s … 300 s). */
const PROGRAMMING_BUCKETS = [
  0.25,
  0.5,
  ...Array.from({ length: 59 }, (_, i) => i + 1),
  ...Array.from({ length: 12 }, (_, i) => 60 + 5 * i),
  ...Array.from({ length: 7 }, (_, i) => 120 + 30 * i),
];
const DURATION_BUCKETS = [0.01, 0.1, 1, 10, 60, 600, 3600];
/** The refusal reasons core publishes, for pruning per-Service series. */
export const REFUSAL_REASONS: readonly RefusedMessage['reason'][] = [
  'no-endpoints',
  'dial-failed',
  'connection-limit',
  'udp-session-limit',
  'policy',
  'source-range',
  'other',
];
/** The `direction` label values of userspace_proxy_bytes_total. */
export const DIRECTIONS = ['to_endpoint', 'to_client'] as const;

/** The labels every per-Service series carries (bytes add `direction`). */
export type ServiceLabel = 'service' | 'protocol';

/** The metric objects, by role. */
export interface MetricCatalog {
  readonly syncDuration: Histogram;
  readonly lastSync: Gauge;
  readonly lastQueued: Gauge;
  readonly serviceChangesPending: Gauge;
  readonly serviceChangesTotal: Counter;
  readonly endpointChangesPending: Gauge;
  readonly endpointChangesTotal: Counter;
  readonly networkProgramming: Histogram;
  readonly healthzTotal: Counter<'code'>;
  readonly livezTotal: Counter<'code'>;
  readonly connections: Counter<ServiceLabel>;
  readonly connectionsActive: Gauge<ServiceLabel>;
  readonly connectionDuration: Histogram<ServiceLabel>;
  readonly bytes: Counter<ServiceLabel | 'direction'>;
  readonly dialFailures: Counter<ServiceLabel>;
  readonly refused: Counter<ServiceLabel | 'reason'>;
  readonly udpSessions: Counter<ServiceLabel>;
  readonly udpSessionsActive: Gauge<ServiceLabel>;
  readonly acceptErrors: Counter<ServiceLabel>;
  readonly objectsRejected: Counter<'kind'>;
  readonly relayFallbacks: Counter<'leg' | 'path'>;
  readonly servicePorts: Gauge;
  readonly manifestReloads: Counter<'result'>;
  readonly httpRefused: Counter<'server' | 'reason'>;
}

/** Options of {@link createMetricCatalog}. */
export interface MetricCatalogOptions {
  /**
   * Called before the per-connection counters and gauges (connections, connections_active, bytes,
   * udp_sessions, udp_sessions_active) are read: a caller that counts per connection in plain
   * numbers adds its counts to them here, once per scrape instead of once per event.
   */
  beforeCollect?: () => void;
}

/** Creates every metric in `registry` (the build info gauge set to 1). */
export function createMetricCatalog(
  registry: Registry,
  options: MetricCatalogOptions = {},
): MetricCatalog {
  const registers = [registry];
  const { beforeCollect } = options;
  const collect = beforeCollect === undefined ? {} : { collect: () => beforeCollect() };
  new Gauge({
    name: 'userspace_proxy_build_info',
    help: 'A metric with a constant 1 value labelled by the daemon version and the Node.js version',
    labelNames: ['version', 'node_version'],
    registers,
  }).set({ version: VERSION, node_version: process.version }, 1);

  const kp = 'kubeproxy_sync_proxy_rules';
  const syncDuration = new Histogram({
    name: `${kp}_duration_seconds`,
    help: `${ALPHA}SyncProxyRules latency in seconds`,
    buckets: SYNC_BUCKETS,
    registers,
  });
  const lastSync = new Gauge({
    name: `${kp}_last_timestamp_seconds`,
    help: `${ALPHA}The last time proxy rules were successfully synced`,
    registers,
  });
  const lastQueued = new Gauge({
    name: `${kp}_last_queued_timestamp_seconds`,
    help: `${ALPHA}The last time a sync of proxy rules was queued`,
    registers,
  });
  const serviceChangesPending = new Gauge({
    name: `${kp}_service_changes_pending`,
    help: `${ALPHA}Pending proxy rules Service changes`,
    registers,
  });
  const serviceChangesTotal = new Counter({
    name: `${kp}_service_changes_total`,
    help: `${ALPHA}Cumulative proxy rules Service changes`,
    registers,
  });
  const endpointChangesPending = new Gauge({
    name: `${kp}_endpoint_changes_pending`,
    help: `${ALPHA}Pending proxy rules Endpoint changes`,
    registers,
  });
  const endpointChangesTotal = new Counter({
    name: `${kp}_endpoint_changes_total`,
    help: `${ALPHA}Cumulative proxy rules Endpoint changes`,
    registers,
  });
  const networkProgramming = new Histogram({
    name: 'kubeproxy_network_programming_duration_seconds',
    help: `${ALPHA}In Cluster Network Programming Latency in seconds`,
    buckets: PROGRAMMING_BUCKETS,
    registers,
  });
  const healthzTotal = new Counter({
    name: 'kubeproxy_proxy_healthz_total',
    help: `${ALPHA}Cumulative proxy healthz HTTP status`,
    labelNames: ['code'],
    registers,
  });
  const livezTotal = new Counter({
    name: 'kubeproxy_proxy_livez_total',
    help: `${ALPHA}Cumulative proxy livez HTTP status`,
    labelNames: ['code'],
    registers,
  });

  const up = 'userspace_proxy';
  const labelNames = ['service', 'protocol'] as const;
  const connections = new Counter({
    name: `${up}_connections_total`,
    help: 'Connections accepted and connected to an endpoint, per Service port',
    labelNames,
    registers,
    ...collect,
  });
  const connectionsActive = new Gauge({
    name: `${up}_connections_active`,
    help: 'Proxied connections open now, per Service port',
    labelNames,
    registers,
    ...collect,
  });
  const connectionDuration = new Histogram({
    name: `${up}_connection_duration_seconds`,
    help: 'How long proxied connections lasted, per Service port',
    labelNames,
    buckets: DURATION_BUCKETS,
    registers,
  });
  const bytes = new Counter({
    name: `${up}_bytes_total`,
    help: 'Bytes proxied, per Service port and direction (to_endpoint: from clients; to_client: from endpoints), counted when a connection or UDP session ends',
    labelNames: [...labelNames, 'direction'],
    registers,
    ...collect,
  });
  const dialFailures = new Counter({
    name: `${up}_dial_failures_total`,
    help: 'Failed attempts to connect to an endpoint, per Service port',
    labelNames,
    registers,
  });
  const refused = new Counter({
    name: `${up}_refused_total`,
    help: 'Clients refused, per Service port and reason (no-endpoints, dial-failed, connection-limit, udp-session-limit, policy, source-range, other)',
    labelNames: [...labelNames, 'reason'],
    registers,
  });
  const udpSessions = new Counter({
    name: `${up}_udp_sessions_total`,
    help: 'UDP client sessions started, per Service port',
    labelNames,
    registers,
    ...collect,
  });
  const udpSessionsActive = new Gauge({
    name: `${up}_udp_sessions_active`,
    help: 'UDP client sessions open now, per Service port',
    labelNames,
    registers,
    ...collect,
  });
  const acceptErrors = new Counter({
    name: `${up}_accept_errors_total`,
    help: 'Failed accepts (such as EMFILE), after which accepting pauses, per Service port',
    labelNames,
    registers,
  });
  const objectsRejected = new Counter({
    name: `${up}_objects_rejected_total`,
    help: 'Malformed Services, Endpoints and EndpointSlices ignored, per kind',
    labelNames: ['kind'],
    registers,
  });
  const relayFallbacks = new Counter({
    name: `${up}_relay_fallbacks_total`,
    help:
      'Relayed sockets that could not use the copy-free read path (a Node upgrade that moved ' +
      "net.Socket's internals shows here), per leg (client, endpoint) and path taken instead",
    labelNames: ['leg', 'path'],
    registers,
  });
  const servicePorts = new Gauge({
    name: `${up}_service_ports`,
    help: 'Service port portals proxied after the last sync',
    registers,
  });
  const manifestReloads = new Counter({
    name: `${up}_manifest_reloads_total`,
    help: 'Reloads of the --services-file manifest, per result (applied, rejected)',
    labelNames: ['result'],
    registers,
  });
  const httpRefused = new Counter({
    name: `${up}_http_connections_refused_total`,
    help: 'Connections the health and metrics servers closed on arrival, per server and reason (connection-limit, client-limit, descriptors)',
    labelNames: ['server', 'reason'],
    registers,
  });
  endpointChangesPending.set(0);
  return {
    syncDuration,
    lastSync,
    lastQueued,
    serviceChangesPending,
    serviceChangesTotal,
    endpointChangesPending,
    endpointChangesTotal,
    networkProgramming,
    healthzTotal,
    livezTotal,
    connections,
    connectionsActive,
    connectionDuration,
    bytes,
    dialFailures,
    refused,
    udpSessions,
    udpSessionsActive,
    acceptErrors,
    objectsRejected,
    relayFallbacks,
    servicePorts,
    manifestReloads,
    httpRefused,
  };
}
