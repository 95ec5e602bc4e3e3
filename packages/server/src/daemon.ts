import diagnosticsChannel from 'node:diagnostics_channel';
import { hostname } from 'node:os';
import {
  componentLogger,
  detectPrimaryIPs,
  EndpointSliceConfig,
  EndpointsConfig,
  type EventRecorder,
  type Logger,
  type ObjectReference,
  type Proxier,
  type ProxierOptions,
  RoundRobinLoadBalancer,
  ServiceConfig,
} from '@userspace-proxy/core';
import { CHANNELS } from '@userspace-proxy/core/diagnostics';
import { ExecConntrackCleaner, IptablesPortalManager } from '@userspace-proxy/linux';
import { LoggingCommandRunner } from './command-log.js';
import { effectiveProxyMode, type KubeProxyConfiguration } from './config-schema.js';
import { buildDaemonProxier } from './daemon-proxier.js';
import { type DaemonServersOptions, startDaemonServers } from './daemon-servers.js';
import { type Clock, ProxierHealth, systemClock } from './healthz-state.js';
import type { HttpLimits } from './http-guard.js';
import type { RetryingListener } from './http-listen.js';
import { LOG_MESSAGE_MAX_CHARS, logSafe } from './log-safe.js';
import { ProxyMetrics } from './metrics.js';
import { subscribeIdlerMetrics } from './metrics-idler.js';
import { registerNativeMetrics } from './metrics-native.js';
import { sourceNodeIPs, watchNodeIPs } from './node-ips.js';
import { proxierOptionsFor } from './proxier-options.js';
import { createSources, type SourceFactoryOptions } from './source-select.js';
import type { ProxySources } from './sources.js';
import { type StatusModel, startDaemonStatus } from './status-model.js';
import { VERSION } from './version.js';
import { observeSources } from './wiring.js';

/**
 * The daemon: sources → config fan-out → Proxier, with the health and metrics servers beside it. It
 * never exits the process itself: `exited` resolves with the exit code the process should use, and
 * main.ts does the exiting, so the whole lifecycle runs in tests.
 */

/** Options of {@link Daemon}; everything but the configuration and logger has a default. */
export interface DaemonOptions {
  config: KubeProxyConfiguration;
  logger: Logger;
  /** `--master`. */
  master?: string;
  env?: Record<string, string | undefined>;
  clock?: Clock;
  /** Builds the sources. Default: the manifest file or the cluster, per the configuration. */
  createSources?: (options: SourceFactoryOptions) => Promise<ProxySources>;
  /** Builds the cluster source (see SourceFactoryOptions.clusterSource). */
  clusterSource?: SourceFactoryOptions['clusterSource'];
  /** Default: core's TCP/UDP sockets with SCTP, and the idling hybrid with `--idling` (daemon-proxier.ts). */
  createProxier?: (options: ProxierOptions) => Promise<Proxier>;
  /** Retry interval for a failed health/metrics bind. Default 5 s. */
  listenRetryMs?: number;
  /**
   * Limits of the health and metrics servers (connection cap, timeouts); the defaults are
   * http-guard.ts's. The descriptor budget is shared by both; default /proc's (fd-budget.ts).
   */
  httpLimits?: Omit<HttpLimits, 'onRefused'>;
  /** False: no health or metrics server (a `--workers` worker: the primary serves them). Default true. */
  servers?: boolean;
  /** What `/metrics` serves instead of the own registry (the primary's merge of its workers'). */
  metricsView?: DaemonServersOptions['metricsView'];
  /** What `/status.json` serves given the own model (the primary's merge of its workers'). */
  statusView?: (own: () => Promise<StatusModel | Record<string, never>>) => Promise<unknown>;
  /** A primary's workers, for `/debug/pprof/…?worker=K` with enableProfiling. */
  workerProfiles?: DaemonServersOptions['workerProfiles'];
}

/** A running (or stopping) daemon. */
export class Daemon {
  readonly #options: DaemonOptions;
  readonly #config: KubeProxyConfiguration;
  readonly #log: Logger;
  readonly #abort = new AbortController();
  readonly #cleanups: (() => void)[] = [];
  readonly #listeners: RetryingListener[] = [];
  readonly #exit: { promise: Promise<number>; resolve: (code: number) => void };
  #proxier: Proxier | undefined;
  #closeProxier: (() => Promise<void>) | undefined;
  #recorder: EventRecorder | undefined;
  #stopping: Promise<void> | undefined;
  #starting: Promise<void> | undefined;
  #draining = false;
  #eligible: (() => boolean) | undefined;
  readonly #skipDrain = new AbortController();
  #status: (() => Promise<StatusModel>) | undefined;
  readonly metrics: ProxyMetrics;
  readonly health: ProxierHealth;
  readonly nodeRef: ObjectReference;

  constructor(options: DaemonOptions) {
    this.#options = options;
    this.#config = options.config;
    this.#log = componentLogger(options.logger, 'daemon');
    let resolve: (code: number) => void = () => {};
    const promise = new Promise<number>((r) => {
      resolve = r;
    });
    this.#exit = { promise, resolve };
    const clock = options.clock ?? systemClock;
    this.health = new ProxierHealth({
      healthTimeoutMs: 2 * this.#config.iptables.syncPeriod,
      clock,
    });
    this.metrics = new ProxyMetrics({ clock });
    const nodeName = (this.#config.hostnameOverride || hostname()).trim().toLowerCase();
    this.nodeRef = { kind: 'Node', name: nodeName, uid: nodeName };
  }

  /** Resolves with the exit code once the daemon has stopped for any reason. */
  get exited(): Promise<number> {
    return this.#exit.promise;
  }

  /** The bound address of the health server (or undefined until it listens). */
  healthAddress() {
    return this.#listeners[0]?.address();
  }

  /** The bound address of the metrics server (or undefined until it listens). */
  metricsAddress() {
    return this.#listeners[1]?.address();
  }

  /**
   * Builds the sources and the Proxier (any failure rejects here, before anything listens), then
   * starts the servers, the fan-out and the sync loop, and records the "Starting" event. A stop that
   * comes meanwhile (a signal) waits for what is being built, closes it, and this resolves without
   * serving; a second call returns the first one's promise.
   */
  start(): Promise<void> {
    this.#starting ??= this.#start();
    return this.#starting;
  }

  async #start(): Promise<void> {
    if (this.#stopping !== undefined) return; // stopped before it started
    const config = this.#config;
    const log = this.#options.logger;
    const mode = effectiveProxyMode(config);
    this.#log.info(
      `Starting userspace-proxy v${VERSION} on node ${this.nodeRef.name} (mode ${mode}, Node.js ${process.version})`,
    );
    if (config.nodePortAddresses.length === 0) {
      this.#log.info(
        'nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using `--nodeport-addresses primary`',
      );
    }
    const sources = await (this.#options.createSources ?? createSources)({
      config,
      master: this.#options.master ?? '',
      nodeName: this.nodeRef.name,
      logger: log,
      metrics: this.metrics,
      ...(this.#options.env ? { env: this.#options.env } : {}),
      ...(this.#options.clusterSource ? { clusterSource: this.#options.clusterSource } : {}),
    });
    this.#eligible = sources.nodeEligible?.bind(sources);
    const recorder = sources.recorder ?? loggingRecorder(componentLogger(log, 'events'));
    this.#recorder = recorder;
    const signal = this.#abort.signal;
    // "primary" node ports need the Node's IPs, which the Proxier reads once: wait for the Node.
    const nodeIPs = await sourceNodeIPs({
      config,
      sources,
      nodeName: this.nodeRef.name,
      signal,
      logger: log,
    });
    if (this.#stopping !== undefined) return; // stopped (a signal) while waiting
    const redirect = mode === 'userspace';
    // The daemon's own load balancer, so that the status page can show each port's rotation.
    const loadBalancer = new RoundRobinLoadBalancer({ logger: log });
    const proxierOptions: ProxierOptions = {
      loadBalancer,
      ...proxierOptionsFor(config, {
        logger: log,
        recorder,
        sourceNodeIPs: nodeIPs,
        // iptables commands logged at trace (-v 3 and up); conntrack logs its own
        portals: redirect
          ? new IptablesPortalManager({
              logger: log,
              runner: new LoggingCommandRunner({ logger: log }),
            })
          : undefined,
        conntrack: redirect ? new ExecConntrackCleaner({ logger: log }) : undefined,
      }),
    };
    let proxier: Proxier;
    if (this.#options.createProxier !== undefined) {
      proxier = await this.#options.createProxier(proxierOptions);
    } else {
      const built = await buildDaemonProxier(config, proxierOptions, { logger: log, sources });
      proxier = built.proxier;
      this.#closeProxier = built.close;
      if (built.idler !== undefined) {
        this.#cleanups.push(subscribeIdlerMetrics(this.metrics.registry));
      }
      if (built.native !== undefined) {
        this.#cleanups.push(registerNativeMetrics(this.metrics.registry, built.native));
      }
    }
    this.#proxier = proxier;
    // Stopped (a signal) while building: the stop, waiting for this start, drains and closes what
    // was built (the proxier, its engines and idler); nothing may start serving after it.
    if (this.#stopping !== undefined) return;
    this.#cleanups.push(
      watchNodeIPs({
        config,
        sources,
        used: proxierOptions.nodeIPs ?? detectPrimaryIPs(),
        logger: log,
        restart: (reason) => void this.stop(reason, { exitCode: 1 }),
      }),
    );

    const services = new ServiceConfig(sources.services, { logger: log });
    services.registerEventHandler(proxier);
    const configs: { run(signal: AbortSignal): Promise<void> }[] = [services];
    const observed = observeSources(this.metrics);
    services.registerEventHandler(observed.services);
    const status = startDaemonStatus({
      ...{ version: VERSION, proxyMode: mode, registry: this.metrics.registry },
      ...{ proxier: () => this.#proxier, idling: config.userspaceProxy.idling },
      endpoints: (svcPort) => loadBalancer.endpoints(svcPort),
      ejected: (svcPort) => loadBalancer.ejectedEndpoints(svcPort),
    });
    services.registerEventHandler(status.catalog);
    this.#cleanups.push(() => status.close());
    this.#status = () => status.build();
    if (sources.endpointSlices) {
      const slices = new EndpointSliceConfig(sources.endpointSlices, { logger: log });
      slices.registerEventHandler(proxier);
      slices.registerEventHandler(observed.endpointSlices);
      configs.push(slices);
    }
    if (sources.endpoints) {
      const endpoints = new EndpointsConfig(sources.endpoints, { logger: log });
      endpoints.registerEventHandler(proxier);
      endpoints.registerEventHandler(observed.endpoints);
      configs.push(endpoints);
    }

    this.#cleanups.push(this.metrics.subscribe(), this.#observeHealth(observed.currentServices));
    this.#startServers(config, mode);
    const background = (what: string, run: Promise<void>) =>
      run.catch((err: unknown) => this.#log.error(`${what} failed`, err));
    background('the source', sources.run(signal));
    for (const c of configs) background('a config controller', c.run(signal));
    this.health.updated();
    background('the sync loop', proxier.syncLoop(signal));
    this.#record('Normal', 'Starting', `Starting userspace-proxy v${VERSION}.`);
  }

  /** Records an event on the Node; a recorder that throws is logged, never fatal. */
  #record(type: 'Normal' | 'Warning', reason: string, message: string): void {
    try {
      this.#recorder?.event(this.nodeRef, type, reason, message);
    } catch (err) {
      this.#log.error(`recording the ${reason} event failed`, err);
    }
  }

  /** Feeds the health state machine from the diagnostics channels; prunes metrics after each sync. */
  #observeHealth(currentServices: () => ReadonlySet<string>): () => void {
    // As in kube-proxy, only changes after initialization queue an update: before it, the proxier
    // is waiting for its sources, which the sync loop start already reported as "updated".
    const onChange = () => {
      if (this.#proxier?.isInitialized()) this.health.queuedUpdate();
    };
    const onSync = () => {
      this.health.updated();
      this.metrics.prune(currentServices());
    };
    diagnosticsChannel.subscribe(CHANNELS.serviceChange, onChange);
    diagnosticsChannel.subscribe(CHANNELS.sync, onSync);
    return () => {
      diagnosticsChannel.unsubscribe(CHANNELS.serviceChange, onChange);
      diagnosticsChannel.unsubscribe(CHANNELS.sync, onSync);
    };
  }

  #startServers(config: KubeProxyConfiguration, mode: string): void {
    if (this.#options.servers === false) return;
    const listeners = startDaemonServers({
      config,
      mode,
      logger: this.#options.logger,
      metrics: this.metrics,
      health: this.health,
      draining: () => this.#draining,
      nodeEligible: () => this.#sourcesEligible(),
      status: () => this.status(),
      ...(this.#options.metricsView ? { metricsView: this.#options.metricsView } : {}),
      ...(this.#options.workerProfiles ? { workerProfiles: this.#options.workerProfiles } : {}),
      ...(this.#options.httpLimits ? { httpLimits: this.#options.httpLimits } : {}),
      ...(this.#options.listenRetryMs !== undefined
        ? { listenRetryMs: this.#options.listenRetryMs }
        : {}),
      record: (reason, message) => this.#record('Warning', reason, message),
      hardFail: () => void this.stop('bind failure', { exitCode: 1, drain: false }),
    });
    this.#listeners.push(...listeners);
  }

  /** The status model (`/status.json`); an empty one before the daemon has started. */
  status(): Promise<unknown> {
    const own = () => this.#status?.() ?? Promise.resolve({});
    return this.#options.statusView ? this.#options.statusView(own) : own();
  }

  #sourcesEligible(): boolean {
    return this.#eligible?.() ?? true;
  }

  /**
   * Stops: /healthz turns 503, listeners close, established connections may finish for up to the
   * drain timeout (unless `drain` is false), then the servers close and `exited` resolves with
   * `exitCode` (default 0). A second call while draining cuts the drain short.
   */
  stop(reason: string, options: { exitCode?: number; drain?: boolean } = {}): Promise<void> {
    if (this.#stopping !== undefined) {
      this.#log.warn(`${reason} while stopping: not waiting for connections any longer`);
      this.#skipDrain.abort();
      return this.#stopping;
    }
    this.#stopping = this.#stop(reason, options.exitCode ?? 0, options.drain ?? true);
    return this.#stopping;
  }

  async #stop(reason: string, exitCode: number, drain: boolean): Promise<void> {
    this.#draining = true;
    this.#log.info(`stopping (${reason}): no new connections are accepted`);
    this.#abort.abort();
    // A start under way is not cut short (each of its steps is bounded, and the wait for the Node
    // ends on the abort above): what it builds is closed below with the rest, so nothing it made
    // outlives `exited` (an SCTP engine's sockets, the idler's timers, the unidler's requests).
    await this.#starting?.catch(() => {});
    const proxier = this.#proxier;
    const timeout = this.#config.userspaceProxy.drainTimeout;
    if (proxier !== undefined) {
      // The proxier stops accepting at once; established connections get up to the drain timeout.
      const skipped = new Promise<undefined>((resolve) => {
        if (this.#skipDrain.signal.aborted) resolve(undefined);
        this.#skipDrain.signal.addEventListener('abort', () => resolve(undefined), { once: true });
      });
      try {
        const result = await Promise.race([proxier.drain(drain ? timeout : 0), skipped]);
        if (result === undefined || result.timedOut) {
          const open = result?.remaining ?? 'some';
          this.#log.warn(`${open} connection(s) still open; closing them`);
        }
        await proxier.shutdown();
        await this.#closeProxier?.();
      } catch (err) {
        this.#log.error('the proxier did not shut down cleanly', err);
      }
    }
    await Promise.all(this.#listeners.map((l) => l.close()));
    for (const cleanup of this.#cleanups.splice(0)) cleanup();
    this.#log.info('stopped');
    this.#exit.resolve(exitCode);
  }
}

/** The default recorder when the source has none: events become log lines. */
export function loggingRecorder(log: Logger): EventRecorder {
  return {
    event(ref, type, reason, message) {
      // Names and messages come from the objects the source delivered: bounded and escaped.
      const what = logSafe(`${ref.kind} ${ref.namespace ? `${ref.namespace}/` : ''}${ref.name}`);
      const line = `event ${type} ${reason} on ${what}: ${logSafe(message, LOG_MESSAGE_MAX_CHARS)}`;
      if (type === 'Warning') log.warn(line);
      else log.info(line);
    },
  };
}
