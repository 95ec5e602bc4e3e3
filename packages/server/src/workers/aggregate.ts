import { AggregatorRegistry } from 'prom-client';
import type { StatusModel, StatusServicePort, StatusWorker } from '../status-model.js';
import { STATUS_RECENT_ERRORS } from '../status-recorder.js';
import type { WorkerAnswer } from './pool.js';

/**
 * The one metrics port and status page of a `--workers` daemon: the primary's own metrics merged
 * with its workers'. The data path (connections, bytes, refusals, UDP sessions, dial and accept
 * failures, the idler's held clients) happens in the workers and is summed over them; everything about sources, syncs and the
 * HTTP servers is the primary's alone (a worker's copy would count each change once per worker).
 * Process and runtime metrics come from every process, merged by prom-client's own aggregators.
 */

/** The data-path metrics, counted in the workers and summed. */
export const WORKER_METRICS: ReadonlySet<string> = new Set([
  'userspace_proxy_connections_total',
  'userspace_proxy_connections_active',
  'userspace_proxy_connection_duration_seconds',
  'userspace_proxy_bytes_total',
  'userspace_proxy_dial_failures_total',
  'userspace_proxy_refused_total',
  'userspace_proxy_udp_sessions_total',
  'userspace_proxy_udp_sessions_active',
  'userspace_proxy_accept_errors_total',
  'userspace_proxy_relay_fallbacks_total',
]);

const perProcess = (name: string) => name.startsWith('process_') || name.startsWith('nodejs_');

/** Counted where the data path runs: the list above, and the idler's (in worker 1 only). */
const inWorkers = (name: string) =>
  WORKER_METRICS.has(name) || name.startsWith('userspace_proxy_idler_');

/** One metric of `Registry.getMetricsAsJSON()`, as much of it as the merge reads. */
interface MetricJson {
  name: string;
  help: string;
  type: string;
  aggregator: string;
  values: { labels: Record<string, string | number>; value: number }[];
}

/** The metric JSON of one process, or [] for an answer that is not one. */
function metricsOf(body: unknown): MetricJson[] {
  return Array.isArray(body) ? (body as MetricJson[]) : [];
}

/**
 * One Prometheus text from the primary's metrics and the workers' answers; adds
 * `userspace_proxy_worker_connections_total{worker}` so that the spread over workers shows.
 */
export async function mergeMetrics(
  primary: readonly unknown[],
  workers: readonly WorkerAnswer[],
): Promise<string> {
  const perWorker: MetricJson = {
    name: 'userspace_proxy_worker_connections_total',
    help: 'TCP connections proxied, per worker (--workers)',
    type: 'counter',
    aggregator: 'sum',
    values: [],
  };
  const sets: MetricJson[][] = [metricsOf(primary).filter((m) => !inWorkers(m.name))];
  for (const w of workers) {
    const metrics = metricsOf(w.body).filter((m) => inWorkers(m.name) || perProcess(m.name));
    sets.push(metrics);
    const connections = metrics.find((m) => m.name === 'userspace_proxy_connections_total');
    const total = (connections?.values ?? []).reduce((sum, v) => sum + v.value, 0);
    perWorker.values.push({ labels: { worker: String(w.index + 1) }, value: total });
  }
  sets.push([perWorker]);
  return AggregatorRegistry.aggregate(sets).metrics();
}

function isModel(body: unknown): body is StatusModel {
  return (
    typeof body === 'object' && body !== null && Array.isArray((body as StatusModel).servicePorts)
  );
}

function addPort(into: StatusServicePort, p: StatusServicePort): void {
  into.connectionsActive += p.connectionsActive;
  into.connectionsTotal += p.connectionsTotal;
  into.bytesIn += p.bytesIn;
  into.bytesOut += p.bytesOut;
  into.udpSessionsActive += p.udpSessionsActive;
  if (p.heldConnections !== null)
    into.heldConnections = (into.heldConnections ?? 0) + p.heldConnections;
  for (const [reason, n] of Object.entries(p.refused)) {
    into.refused[reason] = (into.refused[reason] ?? 0) + n;
  }
}

/**
 * One status model from the workers' (answers in worker order): worker 1 serves every Service
 * port, so its rows, portals and rotations lead; the counts are summed over workers; `workers`
 * lists each worker.
 */
export function mergeStatus(
  workers: readonly WorkerAnswer[],
): (StatusModel & { workers: StatusWorker[] }) | Record<string, never> {
  const models = workers.filter((w) => isModel(w.body));
  const first = models[0]?.body as StatusModel | undefined;
  if (first === undefined) return {};
  const rows = new Map<string, StatusServicePort>();
  const errors: StatusModel['recentErrors'] = [];
  const list: StatusWorker[] = [];
  for (const w of models) {
    const model = w.body as StatusModel;
    let total = 0;
    let active = 0;
    for (const p of model.servicePorts) {
      total += p.connectionsTotal;
      active += p.connectionsActive;
      const id = `${p.key}/${p.protocol}`;
      const row = rows.get(id);
      if (row === undefined) rows.set(id, { ...p, refused: { ...p.refused } });
      else addPort(row, p);
    }
    errors.push(...model.recentErrors);
    list.push({
      worker: w.index + 1,
      pid: w.pid,
      connectionsTotal: total,
      connectionsActive: active,
    });
  }
  errors.sort((a, b) => (a.time < b.time ? 1 : a.time > b.time ? -1 : 0));
  return {
    ...first,
    servicePorts: [...rows.values()].sort((a, b) => a.key.localeCompare(b.key)),
    recentErrors: errors.slice(0, STATUS_RECENT_ERRORS),
    workers: list,
  };
}
