import pLimit from 'p-limit';
import { channels } from '../diagnostics.js';
import type { ConntrackCleaner } from '../hooks/conntrack.js';
import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import type { Logger } from '../logger.js';
import type { EndpointSlice, Endpoints, Service } from '../model/model.js';
import { objectKey, tryObjectKey } from '../model/object-key.js';
import type { ServiceInfo } from '../model/service-info.js';
import { type ServicePortName, servicePortNameString } from '../model/service-port-name.js';
import { reportInvalidObject, validateService } from '../model/validation.js';
import { BoundedFrequencyRunner } from './bounded-frequency-runner.js';
import { EndpointsIntake, guarded } from './endpoints-intake.js';
import { MAX_RETRIES_PER_SYNC, type ModeEntry, type ServicePortMode } from './mode.js';
import type { Proxier, ProxyMode } from './proxier.js';
import {
  type DrainResult,
  PROXIER_EVENT_REASONS,
  type ProxierContext,
  SyncRun,
} from './proxier-context.js';
import { ServiceChangeTracker } from './service-change-tracker.js';
import { type ServicePortSpec, servicePortSpecs } from './service-port-spec.js';

/** The sync runner's name, in logs (the reference's). */
export const SYNC_RUNNER_NAME = 'userspace-proxy-sync-runner';
/** How many syncs may run back to back before `minSyncPeriodMs` applies. */
export const SYNC_BURST = 2;
/** How many conntrack clean-ups one sync runs at once. */
export const CONNTRACK_CONCURRENCY = 4;

/** A Service a config fan-out delivered was validated there: it is not checked or copied again. */
const REUSE = { reuse: true } as const;

/** Everything {@link UserspaceProxier} is built from, resolved by `newCustomProxier`. */
export interface UserspaceProxierConfig {
  ctx: ProxierContext;
  mode: ServicePortMode<ModeEntry>;
  conntrack: ConntrackCleaner;
  syncPeriodMs: number;
  minSyncPeriodMs: number;
  /** Monotonic clock, ms; for the runner and sync durations. */
  now: () => number;
}

/**
 * The Proxier. Service events are validated, collapsed per Service by a ServiceChangeTracker and
 * applied by a sync that a BoundedFrequencyRunner runs (never two at once, at most a burst of 2 then
 * one per `minSyncPeriodMs`, at least one per `syncPeriodMs`). Nothing is synced before both the
 * Services and the endpoints (Endpoints or EndpointSlices) have synced; then a first sync runs.
 * Endpoint events never wait for a sync: they go straight to the load balancer (EndpointSlices merged
 * per Service first), cost O(1) in the number of Services, and never touch sockets or connections.
 *
 * A sync takes every pending change at its start and works only on the Services they name: first it
 * closes the ports that went away, then it opens, re-creates or updates the wanted ones, then retries
 * what a released port or an earlier failure left waiting (bounded), then clears conntrack for UDP
 * ports that went away, then drops stale sticky sessions. No handler method ever throws.
 */
export class UserspaceProxier implements Proxier {
  readonly #ctx: ProxierContext;
  readonly #log: Logger;
  readonly #lb: LoadBalancer;
  readonly #mode: ServicePortMode<ModeEntry>;
  readonly #conntrack: ConntrackCleaner;
  readonly #now: () => number;
  readonly #tracker = new ServiceChangeTracker();
  readonly #runner: BoundedFrequencyRunner;
  readonly #endpoints: EndpointsIntake;
  /** The last valid state of each Service, as handlers delivered it: what a change starts from. */
  readonly #accepted = new Map<string, Service>();
  /** The Service port keys each Service has in the mode, so that a change knows what to remove. */
  readonly #portsByService = new Map<string, Set<string>>();
  readonly #stop = new AbortController();
  #servicesSynced = false;
  #endpointsSynced = false;
  #ready = false;
  #firstSyncDone = false;
  #syncing: Promise<void> = Promise.resolve();
  #shutdown: Promise<void> | undefined;
  #drain: Promise<DrainResult> | undefined;

  constructor(config: UserspaceProxierConfig) {
    this.#ctx = config.ctx;
    this.#log = config.ctx.log;
    this.#lb = config.ctx.lb;
    this.#mode = config.mode;
    this.#conntrack = config.conntrack;
    this.#now = config.now;
    this.#endpoints = new EndpointsIntake(config.ctx.notifier.wrap(this.#lb), this.#log, () =>
      this.#endpointsReady(),
    );
    this.#runner = new BoundedFrequencyRunner({
      name: SYNC_RUNNER_NAME,
      fn: () => this.#runSync(),
      minIntervalMs: config.minSyncPeriodMs,
      maxIntervalMs: config.syncPeriodMs,
      burstRuns: SYNC_BURST,
      logger: this.#log,
      now: config.now,
    });
  }

  /** The capture mode this Proxier runs. */
  get mode(): ProxyMode {
    return this.#mode.mode;
  }

  // --- ServiceHandler ---

  onServiceAdd(service: Service): void {
    this.#serviceEvent(service);
  }

  onServiceUpdate(oldService: Service, service: Service): void {
    // A resync hands over the very same object: nothing can have changed.
    if (oldService === service) return;
    this.#serviceEvent(service);
  }

  onServiceDelete(service: Service): void {
    guarded(this.#log, 'onServiceDelete', () => {
      const result = validateService(service, REUSE);
      const key = result.ok ? objectKey(result.value) : tryObjectKey(service);
      if (!result.ok) reportInvalidObject(this.#log, result.error);
      // A malformed final state still names the Service: what was served for it must go.
      if (key === undefined) return;
      const previous = this.#accepted.get(key) ?? null;
      this.#accepted.delete(key);
      this.#record(key, previous, null);
    });
  }

  onServiceSynced(): void {
    this.#log.debug('services synced');
    this.#servicesSynced = true;
    this.#maybeReady();
  }

  // --- EndpointsHandler and EndpointSliceHandler: straight to the load balancer ---

  onEndpointsAdd(endpoints: Endpoints): void {
    this.#endpoints.onEndpointsAdd(endpoints);
  }

  onEndpointsUpdate(oldEndpoints: Endpoints, endpoints: Endpoints): void {
    this.#endpoints.onEndpointsUpdate(oldEndpoints, endpoints);
  }

  onEndpointsDelete(endpoints: Endpoints): void {
    this.#endpoints.onEndpointsDelete(endpoints);
  }

  onEndpointsSynced(): void {
    this.#endpoints.onEndpointsSynced();
  }

  onEndpointSliceAdd(slice: EndpointSlice): void {
    this.#endpoints.onEndpointSliceAdd(slice);
  }

  onEndpointSliceUpdate(oldSlice: EndpointSlice, slice: EndpointSlice): void {
    this.#endpoints.onEndpointSliceUpdate(oldSlice, slice);
  }

  onEndpointSliceDelete(slice: EndpointSlice): void {
    this.#endpoints.onEndpointSliceDelete(slice);
  }

  onEndpointSlicesSynced(): void {
    this.#endpoints.onEndpointSlicesSynced();
  }

  // --- Proxier ---

  sync(): void {
    this.#runner.run();
  }

  async syncLoop(signal?: AbortSignal): Promise<void> {
    if (this.#stop.signal.aborted) return;
    const stop =
      signal === undefined ? this.#stop.signal : AbortSignal.any([signal, this.#stop.signal]);
    await this.#runner.loop(stop);
  }

  getServiceInfo(svcPort: ServicePortName, portalIP?: string): ServiceInfo | undefined {
    return this.#mode.getServiceInfo(servicePortNameString(svcPort), portalIP);
  }

  serviceInfos(): ServiceInfo[] {
    return this.#mode.serviceInfos();
  }

  isInitialized(): boolean {
    return this.#firstSyncDone;
  }

  /** How many Services have a change waiting for a sync; for inspection and tests. */
  pendingChanges(): number {
    return this.#tracker.size;
  }

  drain(deadlineMs: number): Promise<DrainResult> {
    this.#drain ??= (async () => {
      // No sync may open a socket again: draining is the first half of a shutdown.
      this.#stop.abort();
      await this.#syncing;
      const open = await this.#ctx.stopAccepting();
      this.#log.info(
        `stopped accepting; waiting up to ${deadlineMs} ms for ${open} connection(s) to finish`,
      );
      const result = await this.#ctx.waitIdle(deadlineMs);
      if (result.timedOut) {
        // A FIN (what an exit gives them) would make a cut stream look complete: reset them.
        this.#ctx.abortConnections();
        this.#log.info(
          `drain deadline passed with ${result.remaining} connections open; they were reset`,
        );
      } else {
        this.#log.info('drained: every connection has ended');
      }
      return result;
    })();
    return this.#drain;
  }

  shutdown(): Promise<void> {
    this.#shutdown ??= (async () => {
      this.#stop.abort();
      await this.#syncing;
      await this.#mode.shutdown(new SyncRun(this.#ctx.networkInterfaces));
      this.#log.info('proxier shut down');
    })();
    return this.#shutdown;
  }

  // --- internals ---

  #serviceEvent(service: Service): void {
    guarded(this.#log, 'a Service event', () => {
      const result = validateService(service, REUSE);
      if (!result.ok) {
        // The Service keeps whatever was last applied for it; other Services are not affected.
        reportInvalidObject(this.#log, result.error);
        return;
      }
      const key = objectKey(result.value);
      const previous = this.#accepted.get(key) ?? null;
      this.#accepted.set(key, result.value);
      this.#record(key, previous, result.value);
    });
  }

  #record(key: string, previous: Service | null, current: Service | null): void {
    // After shutdown nothing will sync again: keep no changes an informer still delivers.
    if (this.#stop.signal.aborted) return;
    if (!this.#tracker.update(key, previous, current)) return;
    this.#log.debug(`recorded a change of Service ${key}`);
    if (channels.serviceChange.hasSubscribers) channels.serviceChange.publish({ service: key });
    if (this.#ready) this.#runner.run();
  }

  #endpointsReady(): void {
    this.#log.debug('endpoints synced');
    this.#endpointsSynced = true;
    this.#maybeReady();
  }

  #maybeReady(): void {
    if (this.#ready || !this.#servicesSynced || !this.#endpointsSynced) return;
    this.#ready = true;
    this.#runner.run();
  }

  #runSync(): Promise<void> {
    this.#syncing = this.#syncProxyRules();
    return this.#syncing;
  }

  async #syncProxyRules(): Promise<void> {
    if (this.#stop.signal.aborted) return;
    if (!this.#ready) {
      this.#log.debug('not syncing until Services and endpoints have been received');
      return;
    }
    const start = this.#now();
    const changes = this.#tracker.take();
    const run = new SyncRun(this.#ctx.networkInterfaces);
    const wanted = new Map<string, ServicePortSpec[]>();
    // Removals first, so that a port given up by one Service is free for another in this sync.
    for (const [key, change] of changes) {
      const specs = specsOf(change.current, this.#log);
      wanted.set(key, specs);
      for (const portKey of this.#portsByService.get(key) ?? []) {
        if (specs.some((spec) => spec.key === portKey)) continue;
        await this.#step(`removing ${portKey}`, () => this.#mode.remove(portKey, run));
      }
    }
    for (const [key, specs] of wanted) {
      for (const spec of specs) {
        await this.#step(`applying ${spec.key}`, () => this.#mode.apply(spec, run));
      }
      if (specs.length === 0) this.#portsByService.delete(key);
      else this.#portsByService.set(key, new Set(specs.map((spec) => spec.key)));
    }
    await this.#step('retrying', () => this.#mode.retryPending(run, MAX_RETRIES_PER_SYNC));
    for (const { ref, message } of run.standingConflicts()) {
      this.#ctx.record(ref, 'Warning', PROXIER_EVENT_REASONS.portConflict, message);
    }
    await this.#clearConntrack(run.staleUdpIPs);
    for (const spec of this.#mode.specs()) {
      try {
        this.#lb.cleanupStaleStickySessions(spec.name);
      } catch (error) {
        this.#log.error(`cleaning sticky sessions of ${spec.key} failed`, error);
      }
    }
    this.#firstSyncDone = true;
    const durationMs = this.#now() - start;
    this.#log.debug(`sync done in ${durationMs.toFixed(1)} ms (${changes.size} change(s))`);
    if (channels.sync.hasSubscribers) {
      channels.sync.publish({ durationMs, changes: changes.size, servicePorts: this.#mode.size });
    }
  }

  async #step(what: string, body: () => Promise<void>): Promise<void> {
    try {
      await body();
    } catch (error) {
      this.#log.error(`${what} failed`, error);
    }
  }

  /** Clears conntrack entries of UDP addresses whose port went away; failures are logged only. */
  async #clearConntrack(ips: Set<string>): Promise<void> {
    if (ips.size === 0) return;
    const limit = pLimit(CONNTRACK_CONCURRENCY);
    await Promise.all(
      [...ips].map((ip) =>
        limit(async () => {
          try {
            await this.#conntrack.clearEntriesForIP(ip, 'UDP');
          } catch (error) {
            this.#log.error(`failed to delete stale UDP connections to ${ip}`, error);
          }
        }),
      ),
    );
  }
}

function specsOf(service: Service | null, log: Logger): ServicePortSpec[] {
  if (service === null) return [];
  try {
    return servicePortSpecs(service);
  } catch (error) {
    log.error(`reading the ports of Service ${objectKey(service)} failed`, error);
    return [];
  }
}
