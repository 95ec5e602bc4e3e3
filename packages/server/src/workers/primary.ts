import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { componentLogger, type Logger } from '@userspace-proxy/core';
import type { UnidleHook } from '@userspace-proxy/idler';
import type { KubeProxyConfiguration } from '../config-schema.js';
import type { Daemon, DaemonOptions } from '../daemon.js';
import { createSources } from '../source-select.js';
import type { ProxySources } from '../sources.js';
import { mergeMetrics, mergeStatus } from './aggregate.js';
import { WorkerPool, WorkerProfileError } from './pool.js';
import { PrimaryProxier } from './primary-proxier.js';

/**
 * The `--workers` primary: the daemon as always (sources, config fan-out, health and metrics
 * servers, signals, reloads) with a Proxier that forwards to N workers instead of serving. This
 * file wires it: the pool, the forwarding Proxier, and the merged /metrics and /status.json.
 */

/** The bin, beside this directory, in the same form (main.ts from source, main.js when built). */
export const WORKER_EXEC = fileURLToPath(
  new URL(`../main${extname(fileURLToPath(import.meta.url))}`, import.meta.url),
);

/** The daemon options that make a daemon the primary of `count` workers. */
export function primaryDaemonOptions(
  config: KubeProxyConfiguration,
  logger: Logger,
  count: number,
  /**
   * The daemon these options are for (made after them): the pool's metrics go to its registry, and
   * a worker that is missing queues an update on its health, so /healthz turns 503 if no worker
   * serves the state within the health timeout.
   */
  daemon: () => Pick<Daemon, 'metrics' | 'health'>,
  base: Partial<DaemonOptions> = {},
): Partial<DaemonOptions> {
  const log = componentLogger(logger, 'workers');
  let sources: ProxySources | undefined;
  let unidler: (UnidleHook & { close(): Promise<void> }) | undefined;
  let pool: WorkerPool | undefined;
  return {
    ...base,
    createSources: async (options) => {
      sources = await (base.createSources ?? createSources)(options);
      return sources;
    },
    createProxier: async (options) => {
      if (config.userspaceProxy.idling) unidler = sources?.createUnidler?.();
      const proxier = new PrimaryProxier({
        config,
        kinds: { endpointSlices: !!sources?.endpointSlices, endpoints: !!sources?.endpoints },
        nodeIPs: () => sources?.nodeIPs?.(),
        ...(options.recorder ? { recorder: options.recorder } : {}),
        ...(unidler ? { unidler } : {}),
      });
      pool = new WorkerPool({
        count,
        exec: WORKER_EXEC,
        logger,
        registry: daemon().metrics.registry,
        onReady: (i, send) => proxier.onReady(i, send),
        onMessage: (i, m) => proxier.onMessage(i, m),
        onExit: (i) => {
          proxier.onExit(i);
          daemon().health.queuedUpdate();
        },
      });
      proxier.attach(pool);
      log.info(
        `serving with ${count} workers (node:cluster, every worker accepts on the shared TCP listeners); UDP, SCTP${config.userspaceProxy.idling ? ' and idled Services' : ''} are served by worker 1 only`,
      );
      pool.start();
      // Healthy once the workers have applied the state (a sync on every one), not before: queued
      // after the daemon's start marks the health updated, which it does once this returns.
      setImmediate(() => daemon().health.queuedUpdate());
      const shutdown = proxier.shutdown.bind(proxier);
      proxier.shutdown = async () => {
        await shutdown();
        await unidler?.close();
      };
      return proxier;
    },
    metricsView: (own) => ({
      contentType: own.contentType,
      metrics: async () => {
        const [mine, workers] = await Promise.all([
          own.getMetricsAsJSON(),
          pool?.request('metrics') ?? [],
        ]);
        return mergeMetrics(mine, workers);
      },
    }),
    statusView: async () => mergeStatus((await pool?.request('status')) ?? []),
    workerProfiles: {
      count,
      profile: (index, kind, seconds, signal) =>
        pool === undefined
          ? Promise.reject(new WorkerProfileError('the workers have not started', 'ERR_NO_WORKER'))
          : pool.profile(index, kind, seconds, signal),
    },
  };
}
