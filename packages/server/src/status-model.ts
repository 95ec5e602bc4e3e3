import type {
  Protocol,
  Proxier,
  Service,
  ServiceHandler,
  ServiceInfo,
} from '@userspace-proxy/core';
import { servicePortNameString } from '@userspace-proxy/core';
import type { Registry } from 'prom-client';
import { logSafe } from './log-safe.js';
import { StatusRecorder } from './status-recorder.js';

/**
 * The status model: what `/status`, `/status.json` and `userspace-proxy status` show, built per
 * request from what the daemon already has (the Services it was given, the Proxier's portals, the
 * load balancer's rotations, the metrics registry, the recorder's sync and error ring). It reads
 * metrics by name through the registry rather than through ProxyMetrics' fields, so the metric
 * implementation may change without touching the page.
 */

/** The annotation shown as a Service's description: Kubernetes' well-known one. */
export const DESCRIPTION_ANNOTATION = 'kubernetes.io/description';

/** Longest description shown; longer ones are cut (the page is for an overview). */
export const DESCRIPTION_MAX_CHARS = 200;

/** One proxy listener of a Service port. */
export interface StatusPortal {
  /** The portal IP (a Service IP, or "" for a node-port listener on every address). */
  ip: string;
  /** The portal port (the node port for a node-port listener). */
  port: number;
  /** The port the proxy socket is bound to. */
  proxyPort: number;
  /** The Service's node port, 0 when none. */
  nodePort: number;
  /** True for an external IP. */
  external: boolean;
}

/** One Service port: a row of the page. */
export interface StatusServicePort {
  namespace: string;
  name: string;
  /** The port's name ("" for an unnamed single port). */
  port: string;
  protocol: Protocol;
  /** "ns/name:port", the metrics' `service` label. */
  key: string;
  /** The Service port number. */
  servicePort: number;
  /** The `kubernetes.io/description` annotation, truncated; "" when none. */
  description: string;
  portals: StatusPortal[];
  /** The load balancer's rotation ("ip:port"); null when the load balancer cannot tell. */
  endpoints: string[] | null;
  /** Endpoints taken out of the rotation by outlier ejection; null: no ejection in this build. */
  ejected: string[] | null;
  connectionsActive: number;
  connectionsTotal: number;
  /** Bytes from clients (counted when a connection or UDP session ends). */
  bytesIn: number;
  /** Bytes from endpoints. */
  bytesOut: number;
  udpSessionsActive: number;
  /** Clients held by idling; null when idling is off. */
  heldConnections: number | null;
  /** Refusals per reason (no-endpoints, dial-failed, connection-limit…). */
  refused: Record<string, number>;
}

/** The whole status document (`/status.json`). */
export interface StatusModel {
  version: string;
  proxyMode: string;
  /** When the model was built, ISO 8601. */
  generatedAt: string;
  /** Whether idling is on (held connections are counted). */
  idling: boolean;
  sync: {
    /** Last successful sync, Unix seconds; null before the first. */
    lastTimestampSeconds: number | null;
    /** How long the last sync took, seconds; null before the first. */
    lastDurationSeconds: number | null;
    /** Syncs seen since the daemon started. */
    count: number;
  };
  servicePorts: StatusServicePort[];
  recentErrors: { time: string; kind: string; service: string; message: string }[];
  /** With `--workers` above 1: each worker (the counts above are their sums). */
  workers?: StatusWorker[];
}

/** One `--workers` worker on the status page. */
export interface StatusWorker {
  /** 1-based, as the logs name it. */
  worker: number;
  pid: number;
  connectionsTotal: number;
  connectionsActive: number;
}

/** Keeps the Services the daemon was given (registered on the ServiceConfig beside the Proxier). */
export class ServiceCatalog implements ServiceHandler {
  readonly #services = new Map<string, Service>();

  #key(s: Service): string | undefined {
    const { namespace, name } = s.metadata ?? {};
    return typeof name === 'string' ? `${namespace ?? ''}/${name}` : undefined;
  }
  /** A Service appeared. */
  onServiceAdd(s: Service): void {
    const key = this.#key(s);
    if (key !== undefined) this.#services.set(key, s);
  }
  /** A Service changed. */
  onServiceUpdate(_old: Service, s: Service): void {
    this.onServiceAdd(s);
  }
  /** A Service went away. */
  onServiceDelete(s: Service): void {
    const key = this.#key(s);
    if (key !== undefined) this.#services.delete(key);
  }
  /** Nothing to do: the catalog has no initial state to wait for. */
  onServiceSynced(): void {}
  /** The current Services, sorted by namespace/name. */
  services(): Service[] {
    return [...this.#services.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([, s]) => s);
  }
}

/** What the model is built from. */
export interface StatusSources {
  version: string;
  proxyMode: string;
  registry: Registry;
  catalog: ServiceCatalog;
  recorder: StatusRecorder;
  proxier: () => Proxier | undefined;
  /** The load balancer's rotation of a Service port, if it can tell (core's RoundRobinLoadBalancer). */
  endpoints?: (svcPort: { namespace: string; name: string; port: string }) => readonly string[];
  /** Endpoints outlier ejection has taken out of the rotation (RoundRobinLoadBalancer.ejectedEndpoints). */
  ejected?: (svcPort: { namespace: string; name: string; port: string }) => readonly string[];
  idling: boolean;
  now?: () => number;
}

type Values = Map<string, number>;

/** Reads a metric's series as "service|protocol[|extra]" → value, whatever the metric's internals. */
async function series(registry: Registry, name: string, extra?: string): Promise<Values> {
  const out: Values = new Map();
  const metric = registry.getSingleMetric(name);
  if (metric === undefined) return out;
  const got = (await metric.get()) as {
    values: { labels: Record<string, string | number>; value: number; metricName?: string }[];
  };
  for (const v of got.values) {
    if (v.metricName !== undefined && v.metricName !== name) continue;
    const base = `${v.labels.service}|${v.labels.protocol}`;
    const key = extra === undefined ? base : `${base}|${v.labels[extra]}`;
    out.set(key, (out.get(key) ?? 0) + v.value);
  }
  return out;
}

async function single(registry: Registry, name: string): Promise<number | null> {
  const metric = registry.getSingleMetric(name);
  if (metric === undefined) return null;
  const got = (await metric.get()) as { values: { value: number }[] };
  const value = got.values[0]?.value;
  return value === undefined || value === 0 ? null : value;
}

/** Builds the model now. Never throws for odd input: names are bounded; values default to 0. */
export async function buildStatusModel(src: StatusSources): Promise<StatusModel> {
  const r = src.registry;
  const [active, total, bytes, udp, refused, held] = await Promise.all([
    series(r, 'userspace_proxy_connections_active'),
    series(r, 'userspace_proxy_connections_total'),
    series(r, 'userspace_proxy_bytes_total', 'direction'),
    series(r, 'userspace_proxy_udp_sessions_active'),
    series(r, 'userspace_proxy_refused_total', 'reason'),
    series(r, 'userspace_proxy_idler_held_connections'),
  ]);
  const lastTimestamp = await single(r, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds');
  // Indexed once, so that a page of thousands of Services costs one pass over each source.
  const infos = new Map<string, ServiceInfo[]>();
  for (const info of src.proxier()?.serviceInfos() ?? []) {
    const k = `${info.serviceRef.namespace ?? ''}/${info.serviceRef.name}`;
    const list = infos.get(k);
    if (list === undefined) infos.set(k, [info]);
    else list.push(info);
  }
  const reasonsOf = new Map<string, Record<string, number>>();
  for (const [k, v] of refused) {
    const cut = k.lastIndexOf('|');
    if (v <= 0 || cut < 0) continue;
    const base = k.slice(0, cut);
    const reasons = reasonsOf.get(base) ?? {};
    reasons[k.slice(cut + 1)] = v;
    reasonsOf.set(base, reasons);
  }
  const ports: StatusServicePort[] = [];
  for (const service of src.catalog.services()) {
    const namespace = service.metadata.namespace ?? '';
    const name = service.metadata.name ?? '';
    const own = infos.get(`${namespace}/${name}`) ?? [];
    const specPorts = service.spec?.ports ?? [];
    const description = logSafe(
      String(service.metadata.annotations?.[DESCRIPTION_ANNOTATION] ?? ''),
      DESCRIPTION_MAX_CHARS,
    );
    for (const sp of specPorts) {
      const protocol = sp.protocol ?? 'TCP';
      const svcPort = { namespace, name, port: sp.name ?? '' };
      const key = servicePortNameString(svcPort);
      const sameProtocol = specPorts.filter((p) => (p.protocol ?? 'TCP') === protocol);
      const mine = own.filter(
        (i) =>
          i.protocol === protocol &&
          (sameProtocol.length === 1 ||
            i.portal.port === sp.port ||
            (sp.nodePort !== undefined && sp.nodePort !== 0 && i.portal.port === sp.nodePort)),
      );
      const m = `${key}|${protocol}`;
      const reasons = reasonsOf.get(m) ?? {};
      ports.push({
        namespace,
        name,
        port: svcPort.port,
        protocol,
        key,
        servicePort: sp.port,
        description,
        portals: mine.map((i) => ({
          ip: i.portal.ip,
          port: i.portal.port,
          proxyPort: i.proxyPort,
          nodePort: i.nodePort,
          external: i.portal.isExternal,
        })),
        endpoints: src.endpoints ? [...src.endpoints(svcPort)].sort() : null,
        ejected: src.ejected ? [...src.ejected(svcPort)] : null,
        connectionsActive: active.get(m) ?? 0,
        connectionsTotal: total.get(m) ?? 0,
        bytesIn: bytes.get(`${m}|to_endpoint`) ?? 0,
        bytesOut: bytes.get(`${m}|to_client`) ?? 0,
        udpSessionsActive: udp.get(m) ?? 0,
        heldConnections: src.idling ? (held.get(m) ?? 0) : null,
        refused: reasons,
      });
    }
  }
  const last = src.recorder.lastSync();
  return {
    version: src.version,
    proxyMode: src.proxyMode,
    generatedAt: new Date((src.now ?? Date.now)()).toISOString(),
    idling: src.idling,
    sync: {
      lastTimestampSeconds: lastTimestamp ?? last?.timestampSeconds ?? null,
      lastDurationSeconds: last ? last.durationMs / 1000 : null,
      count: src.recorder.syncCount(),
    },
    servicePorts: ports,
    recentErrors: src.recorder.recentErrors(),
  };
}

/** A daemon's status: the catalog to register on its ServiceConfig, the builder, and `close`. */
export interface DaemonStatus {
  catalog: ServiceCatalog;
  build(): Promise<StatusModel>;
  close(): void;
}

/** Starts the recorder (it subscribes to core's channels) and a catalog for a daemon. */
export function startDaemonStatus(src: Omit<StatusSources, 'catalog' | 'recorder'>): DaemonStatus {
  const catalog = new ServiceCatalog();
  const recorder = new StatusRecorder();
  return {
    catalog,
    build: () => buildStatusModel({ ...src, catalog, recorder }),
    close: () => recorder.close(),
  };
}
