import diagnosticsChannel from 'node:diagnostics_channel';
import type { EndpointSlice, Endpoints } from '@userspace-proxy/core';
import {
  type AcceptErrorMessage,
  CHANNELS,
  type ConnectionCloseMessage,
  type ConnectionOpenMessage,
  type DialErrorMessage,
  type ObjectRejectedMessage,
  type RefusedMessage,
  type RelayFallbackMessage,
  type ServiceChangeMessage,
  type SyncMessage,
  type UdpSessionCloseMessage,
  type UdpSessionMessage,
} from '@userspace-proxy/core/diagnostics';
import { collectDefaultMetrics, Registry } from 'prom-client';
import type { HealthResponseObserver } from './health-server.js';
import { type Clock, systemClock } from './healthz-state.js';
import {
  createMetricCatalog,
  DIRECTIONS,
  type MetricCatalog,
  REFUSAL_REASONS,
} from './metrics-catalog.js';

/**
 * The daemon's Prometheus metrics (defined in metrics-catalog.ts), fed from core's diagnostics
 * channels, so the library never depends on prom-client. Per-Service series are removed when their Service goes away, which
 * bounds the number of series by the number of Service ports.
 */

/** The EndpointSlice/Endpoints annotation the endpoints controller sets when a change was triggered. */
export const LAST_CHANGE_TRIGGER_TIME = 'endpoints.kubernetes.io/last-change-trigger-time';

/** Options of {@link ProxyMetrics}. */
export interface ProxyMetricsOptions {
  /** Default: a new Registry, so tests and embedders never share the global one. */
  registry?: Registry;
  clock?: Clock;
  /** Process and Node.js runtime metrics (process_*, nodejs_*). Default true. */
  defaultMetrics?: boolean;
}

/** The `service` and `protocol` labels of one Service port's series. */
type SeriesLabels = { service: string; protocol: string };

/**
 * One Service port's per-connection series: its label objects made once, and what happened since
 * the last scrape in plain numbers. prom-client hashes and validates the labels on every `inc`
 * (several µs per connection across the five calls a connection made); counting here is a few
 * stores, and {@link ProxyMetrics} adds the counts to the prom-client metrics when they are read.
 */
class Series {
  readonly labels: SeriesLabels;
  readonly toEndpoint: SeriesLabels & { direction: 'to_endpoint' };
  readonly toClient: SeriesLabels & { direction: 'to_client' };
  /** The Service's "ns/name", what `prune` is given. */
  readonly nsName: string;
  /** Connections and sessions open now (the series is kept while any is). */
  active = 0;
  /** Since the last flush; `touched` says which metrics an event reached (a 0 still makes the series). */
  touched = 0;
  connections = 0;
  connectionsActive = 0;
  bytesIn = 0;
  bytesOut = 0;
  udpSessions = 0;
  udpSessionsActive = 0;
  /** On the list of series to flush. */
  dirty = false;
  /** Pruned: its pending counts are dropped. */
  removed = false;

  constructor(service: string, protocol: string) {
    this.labels = { service, protocol };
    this.toEndpoint = { service, protocol, direction: 'to_endpoint' };
    this.toClient = { service, protocol, direction: 'to_client' };
    this.nsName = service.split(':')[0] ?? service;
  }
}

/** Bits of {@link Series.touched}. */
const CONNECTIONS = 1;
const CONNECTIONS_ACTIVE = 2;
const BYTES = 4;
const UDP_SESSIONS = 8;
const UDP_SESSIONS_ACTIVE = 16;

/** Every metric of the daemon, and the subscriptions that feed them. */
export class ProxyMetrics implements HealthResponseObserver {
  readonly registry: Registry;
  readonly #clock: Clock;
  readonly #pendingServices = new Set<string>();
  /** Per-Service series seen: service → protocol → its series. */
  readonly #series = new Map<string, Map<string, Series>>();
  /** Series with counts not yet added to the prom-client metrics. */
  #dirty: Series[] = [];

  /** The metric objects, for embedders that add to or read them. */
  readonly catalog: MetricCatalog;

  constructor(options: ProxyMetricsOptions = {}) {
    this.registry = options.registry ?? new Registry();
    this.#clock = options.clock ?? systemClock;
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
    this.catalog = createMetricCatalog(this.registry, { beforeCollect: () => this.#flush() });
  }

  /** Seconds since the epoch, for the timestamp gauges. */
  #nowSeconds(): number {
    return this.#clock.now() / 1000;
  }

  /** The series of a message's Service port, made on first sight. */
  #track(labels: { service: string; protocol: string }): Series {
    let byProtocol = this.#series.get(labels.service);
    if (byProtocol === undefined) {
      byProtocol = new Map();
      this.#series.set(labels.service, byProtocol);
    }
    let series = byProtocol.get(labels.protocol);
    if (series === undefined) {
      series = new Series(labels.service, labels.protocol);
      byProtocol.set(labels.protocol, series);
    }
    return series;
  }

  /** Marks `series` as having counts to flush. */
  #touch(series: Series, bits: number): void {
    series.touched |= bits;
    if (!series.dirty) {
      series.dirty = true;
      this.#dirty.push(series);
    }
  }

  /** Adds the counts kept since the last flush to the prom-client metrics (before a scrape). */
  #flush(): void {
    const dirty = this.#dirty;
    if (dirty.length === 0) return;
    this.#dirty = [];
    const c = this.catalog;
    for (const s of dirty) {
      s.dirty = false;
      const touched = s.touched;
      s.touched = 0;
      if (s.removed) continue;
      if (touched & CONNECTIONS) c.connections.inc(s.labels, s.connections);
      if (touched & CONNECTIONS_ACTIVE) c.connectionsActive.inc(s.labels, s.connectionsActive);
      if (touched & BYTES) {
        c.bytes.inc(s.toEndpoint, s.bytesIn);
        c.bytes.inc(s.toClient, s.bytesOut);
      }
      if (touched & UDP_SESSIONS) c.udpSessions.inc(s.labels, s.udpSessions);
      if (touched & UDP_SESSIONS_ACTIVE) c.udpSessionsActive.inc(s.labels, s.udpSessionsActive);
      s.connections = 0;
      s.connectionsActive = 0;
      s.bytesIn = 0;
      s.bytesOut = 0;
      s.udpSessions = 0;
      s.udpSessionsActive = 0;
    }
  }

  /** A change was queued for a sync. */
  serviceChanged(message: ServiceChangeMessage): void {
    this.catalog.serviceChangesTotal.inc();
    this.catalog.lastQueued.set(this.#nowSeconds());
    this.#pendingServices.add(message.service);
    this.catalog.serviceChangesPending.set(this.#pendingServices.size);
  }

  /** A sync finished. */
  synced(message: SyncMessage): void {
    this.catalog.syncDuration.observe(message.durationMs / 1000);
    this.catalog.lastSync.set(this.#nowSeconds());
    this.#pendingServices.clear();
    this.catalog.serviceChangesPending.set(0);
    this.catalog.servicePorts.set(message.servicePorts);
  }

  /**
   * An Endpoints or EndpointSlice event reached the proxy. Endpoint changes go straight to the load
   * balancer, so nothing stays pending; the programming latency is observed at once when the object
   * carries the endpoints controller's trigger time.
   */
  endpointChanged(obj?: EndpointSlice | Endpoints): void {
    this.catalog.endpointChangesTotal.inc();
    const trigger = obj?.metadata?.annotations?.[LAST_CHANGE_TRIGGER_TIME];
    const at = trigger === undefined ? Number.NaN : Date.parse(trigger);
    if (Number.isFinite(at)) {
      this.catalog.networkProgramming.observe(Math.max(0, (this.#clock.now() - at) / 1000));
    }
  }

  healthzResponse(code: number): void {
    this.catalog.healthzTotal.inc({ code: String(code) });
  }

  livezResponse(code: number): void {
    this.catalog.livezTotal.inc({ code: String(code) });
  }

  /** The health or metrics server closed a connection on arrival (http-guard.ts). */
  httpConnectionRefused(server: string, reason: string): void {
    this.catalog.httpRefused.inc({ server, reason });
  }

  /** A manifest reload was applied or rejected. */
  manifestReloaded(result: 'applied' | 'rejected'): void {
    this.catalog.manifestReloads.inc({ result });
  }

  /**
   * Drops the per-Service series of Services that no longer exist ("ns/name" keys), unless they
   * still have open connections or sessions, so long-running daemons with churning Services keep a
   * bounded number of series.
   */
  prune(currentServices: ReadonlySet<string>): void {
    for (const [service, byProtocol] of this.#series) {
      for (const [protocol, series] of byProtocol) {
        if (currentServices.has(series.nsName) || series.active > 0) continue;
        const labels = { service, protocol };
        for (const metric of [
          this.catalog.connections,
          this.catalog.connectionsActive,
          this.catalog.connectionDuration,
          this.catalog.dialFailures,
          this.catalog.udpSessions,
          this.catalog.udpSessionsActive,
          this.catalog.acceptErrors,
        ]) {
          metric.remove(labels);
        }
        for (const direction of DIRECTIONS) this.catalog.bytes.remove({ ...labels, direction });
        for (const reason of REFUSAL_REASONS) this.catalog.refused.remove({ ...labels, reason });
        series.removed = true;
        byProtocol.delete(protocol);
      }
      if (byProtocol.size === 0) this.#series.delete(service);
    }
  }

  /** Subscribes to every core diagnostics channel; returns the unsubscribe function. */
  subscribe(): () => void {
    const handlers: [string, (message: unknown) => void][] = [
      [CHANNELS.serviceChange, (m) => this.serviceChanged(m as ServiceChangeMessage)],
      [CHANNELS.sync, (m) => this.synced(m as SyncMessage)],
      [
        CHANNELS.connectionOpen,
        (m) => {
          const series = this.#track(m as ConnectionOpenMessage);
          series.connections++;
          series.connectionsActive++;
          series.active++;
          this.#touch(series, CONNECTIONS | CONNECTIONS_ACTIVE);
        },
      ],
      [
        CHANNELS.connectionClose,
        (m) => {
          const msg = m as ConnectionCloseMessage;
          const series = this.#track(msg);
          series.connectionsActive--;
          series.active = Math.max(0, series.active - 1);
          series.bytesIn += msg.bytesIn;
          series.bytesOut += msg.bytesOut;
          this.#touch(series, CONNECTIONS_ACTIVE | BYTES);
          this.catalog.connectionDuration.observe(series.labels, msg.durationMs / 1000);
        },
      ],
      [
        CHANNELS.dialError,
        (m) => this.catalog.dialFailures.inc(this.#track(m as DialErrorMessage).labels),
      ],
      [
        CHANNELS.refused,
        (m) => {
          const msg = m as RefusedMessage;
          const { service, protocol } = this.#track(msg).labels;
          this.catalog.refused.inc({ service, protocol, reason: msg.reason });
        },
      ],
      [
        CHANNELS.udpSessionOpen,
        (m) => {
          const series = this.#track(m as UdpSessionMessage);
          series.udpSessions++;
          series.udpSessionsActive++;
          series.active++;
          this.#touch(series, UDP_SESSIONS | UDP_SESSIONS_ACTIVE);
        },
      ],
      [
        CHANNELS.udpSessionClose,
        (m) => {
          const msg = m as UdpSessionCloseMessage;
          const series = this.#track(msg);
          series.udpSessionsActive--;
          series.active = Math.max(0, series.active - 1);
          series.bytesIn += msg.bytesIn;
          series.bytesOut += msg.bytesOut;
          this.#touch(series, UDP_SESSIONS_ACTIVE | BYTES);
        },
      ],
      [
        CHANNELS.acceptError,
        (m) => this.catalog.acceptErrors.inc(this.#track(m as AcceptErrorMessage).labels),
      ],
      [
        CHANNELS.objectRejected,
        (m) => this.catalog.objectsRejected.inc({ kind: (m as ObjectRejectedMessage).kind }),
      ],
      [
        CHANNELS.relayFallback,
        (m) => {
          const { leg, path } = m as RelayFallbackMessage;
          this.catalog.relayFallbacks.inc({ leg, path });
        },
      ],
    ];
    const subscribed = handlers.map(([name, handler]) => {
      // A metrics bug must never break the proxy path that publishes.
      const guarded = (message: unknown) => {
        try {
          handler(message);
        } catch {
          // ignored on purpose
        }
      };
      diagnosticsChannel.subscribe(name, guarded);
      return [name, guarded] as const;
    });
    return () => {
      for (const [name, guarded] of subscribed) diagnosticsChannel.unsubscribe(name, guarded);
    };
  }
}
