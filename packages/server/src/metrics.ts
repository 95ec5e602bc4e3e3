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

/** Every metric of the daemon, and the subscriptions that feed them. */
export class ProxyMetrics implements HealthResponseObserver {
  readonly registry: Registry;
  readonly #clock: Clock;
  readonly #pendingServices = new Set<string>();
  /** Per-Service series seen, "service\0protocol" → the Service's "ns/name". */
  readonly #series = new Map<string, string>();
  readonly #active = new Map<string, number>();

  /** The metric objects, for embedders that add to or read them. */
  readonly catalog: MetricCatalog;

  constructor(options: ProxyMetricsOptions = {}) {
    this.registry = options.registry ?? new Registry();
    this.#clock = options.clock ?? systemClock;
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
    this.catalog = createMetricCatalog(this.registry);
  }

  /** Seconds since the epoch, for the timestamp gauges. */
  #nowSeconds(): number {
    return this.#clock.now() / 1000;
  }

  #track(labels: { service: string; protocol: string }): { service: string; protocol: string } {
    const key = `${labels.service}\0${labels.protocol}`;
    if (!this.#series.has(key))
      this.#series.set(key, labels.service.split(':')[0] ?? labels.service);
    return { service: labels.service, protocol: labels.protocol };
  }

  #addActive(labels: { service: string; protocol: string }, delta: number): void {
    const key = `${labels.service}\0${labels.protocol}`;
    this.#active.set(key, Math.max(0, (this.#active.get(key) ?? 0) + delta));
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
    for (const [key, nsName] of this.#series) {
      if (currentServices.has(nsName) || (this.#active.get(key) ?? 0) > 0) continue;
      const [service = '', protocol = ''] = key.split('\0');
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
      this.#series.delete(key);
      this.#active.delete(key);
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
          const labels = this.#track(m as ConnectionOpenMessage);
          this.catalog.connections.inc(labels);
          this.catalog.connectionsActive.inc(labels);
          this.#addActive(labels, 1);
        },
      ],
      [
        CHANNELS.connectionClose,
        (m) => {
          const msg = m as ConnectionCloseMessage;
          const labels = this.#track(msg);
          this.catalog.connectionsActive.dec(labels);
          this.#addActive(labels, -1);
          this.catalog.connectionDuration.observe(labels, msg.durationMs / 1000);
          this.catalog.bytes.inc({ ...labels, direction: 'to_endpoint' }, msg.bytesIn);
          this.catalog.bytes.inc({ ...labels, direction: 'to_client' }, msg.bytesOut);
        },
      ],
      [
        CHANNELS.dialError,
        (m) => this.catalog.dialFailures.inc(this.#track(m as DialErrorMessage)),
      ],
      [
        CHANNELS.refused,
        (m) => {
          const msg = m as RefusedMessage;
          this.catalog.refused.inc({ ...this.#track(msg), reason: msg.reason });
        },
      ],
      [
        CHANNELS.udpSessionOpen,
        (m) => {
          const labels = this.#track(m as UdpSessionMessage);
          this.catalog.udpSessions.inc(labels);
          this.catalog.udpSessionsActive.inc(labels);
          this.#addActive(labels, 1);
        },
      ],
      [
        CHANNELS.udpSessionClose,
        (m) => {
          const msg = m as UdpSessionCloseMessage;
          const labels = this.#track(msg);
          this.catalog.udpSessionsActive.dec(labels);
          this.#addActive(labels, -1);
          this.catalog.bytes.inc({ ...labels, direction: 'to_endpoint' }, msg.bytesIn);
          this.catalog.bytes.inc({ ...labels, direction: 'to_client' }, msg.bytesOut);
        },
      ],
      [
        CHANNELS.acceptError,
        (m) => this.catalog.acceptErrors.inc(this.#track(m as AcceptErrorMessage)),
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
