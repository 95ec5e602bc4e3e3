import type { Server } from 'node:http';
import type { Logger } from '@userspace-proxy/core';
import { LogLimiter } from '@userspace-proxy/core/sockets';
import type { Registry } from 'prom-client';
import type { KubeProxyConfiguration } from './config-schema.js';
import { configzBody } from './configz.js';
import { sharedProcessProfiler, type WorkerProfiles } from './debug-profiling.js';
import { ProcDescriptorBudget } from './fd-budget.js';
import { createHealthServer } from './health-server.js';
import type { ProxierHealth } from './healthz-state.js';
import { parseListenAddress } from './host-port.js';
import type { HttpLimits } from './http-guard.js';
import { RetryingListener } from './http-listen.js';
import type { ProxyMetrics } from './metrics.js';
import { createMetricsServer, type MetricsSource } from './metrics-server.js';

/**
 * The daemon's two HTTP servers, health and metrics, each behind a RetryingListener. Separate from
 * daemon.ts so that a `--workers` primary and a single-process daemon start them the same way.
 */

/** What {@link startDaemonServers} needs from its daemon. */
export interface DaemonServersOptions {
  config: KubeProxyConfiguration;
  mode: string;
  logger: Logger;
  metrics: ProxyMetrics;
  health: ProxierHealth;
  draining(): boolean;
  nodeEligible(): boolean;
  status(): Promise<unknown>;
  /** What `/metrics` serves given the own registry; default the registry itself. */
  metricsView?: (own: Registry) => MetricsSource;
  httpLimits?: Omit<HttpLimits, 'onRefused'>;
  /** A `--workers` primary's workers, for `/debug/pprof/…?worker=K` (enableProfiling). */
  workerProfiles?: WorkerProfiles;
  listenRetryMs?: number;
  /** Records a Warning event (a failed bind). */
  record(reason: string, message: string): void;
  /** A bind failed with bindAddressHardFail set: the daemon stops. */
  hardFail(): void;
}

/** Starts both servers; returns their listeners (closed by the daemon's stop). */
export function startDaemonServers(o: DaemonServersOptions): RetryingListener[] {
  const descriptors = o.httpLimits?.descriptors ?? new ProcDescriptorBudget();
  const limits = (server: string): HttpLimits => {
    // A flood of refusals is one line per server every 10 s, with the count of the ones held back.
    const quiet = new LogLimiter();
    return {
      ...o.httpLimits,
      descriptors,
      onRefused: (reason, client) => {
        o.metrics.httpConnectionRefused(server, reason);
        const held = quiet.take();
        if (held < 0) return;
        const from = client === '' ? '' : ` from ${client}`;
        const more = held > 0 ? ` (${held} more refused since the last message)` : '';
        o.logger.warn(`the ${server} server refused a connection${from}: ${reason}${more}`);
      },
    };
  };
  const registry = o.metrics.registry;
  const servers: [string, string, Server, string][] = [
    [
      'healthz',
      o.config.healthzBindAddress,
      createHealthServer({
        health: o.health,
        observer: o.metrics,
        draining: o.draining,
        nodeEligible: o.nodeEligible,
        limits: limits('healthz'),
      }),
      'FailedToStartProxierHealthcheck',
    ],
    [
      'metrics',
      o.config.metricsBindAddress,
      createMetricsServer({
        registry: o.metricsView ? o.metricsView(registry) : registry,
        proxyMode: o.mode,
        configz: () => configzBody(o.config),
        status: o.status,
        limits: limits('metrics'),
        ...(o.config.enableProfiling
          ? {
              profiling: {
                profiler: sharedProcessProfiler(o.logger),
                ...(o.workerProfiles ? { workers: o.workerProfiles } : {}),
              },
            }
          : {}),
      }),
      'FailedToStartMetricServer',
    ],
  ];
  const listeners: RetryingListener[] = [];
  for (const [name, address, server, reason] of servers) {
    const { host, port } = parseListenAddress(address);
    const listener = new RetryingListener(server, {
      name,
      host,
      port,
      hardFail: o.config.bindAddressHardFail,
      logger: o.logger,
      ...(o.listenRetryMs !== undefined ? { retryDelayMs: o.listenRetryMs } : {}),
      onFailure: (err) => o.record(reason, err.message),
    });
    listeners.push(listener);
    listener.start().catch((err: unknown) => {
      o.logger.fatal(`${(err as Error).message}; exiting (bindAddressHardFail)`);
      o.hardFail();
    });
  }
  return listeners;
}
