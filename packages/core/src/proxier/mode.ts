import { PortalError } from '../errors.js';
import type { PortalKind } from '../hooks/portal-manager.js';
import type { ServiceInfo } from '../model/service-info.js';
import type { ProxyMode } from './proxier.js';
import { PROXIER_EVENT_REASONS, type ProxierContext, type SyncRun } from './proxier-context.js';
import type { ServiceInfoImpl } from './service-info-impl.js';
import { compareSpecs, type ServicePortSpec, specAddresses } from './service-port-spec.js';

/**
 * A real proxying listener on an address a mode must own: in both modes the node port on each
 * node-port address, in redirect mode the Service port on a Service IP local to the host, in
 * service-port-portal mode every Service address. Each is a claim on (address, port, protocol) in
 * the shared NodePortClaims, so two Services asking for one conflict visibly instead of failing
 * with EADDRINUSE.
 */
export interface Listener {
  /** null: every address (node ports with nodePortAddresses "all"). */
  readonly ip: string | null;
  /** The Service port, or the node port. */
  readonly port: number;
  /** Which address this is; an external IP's info says so (`portal.isExternal`). */
  readonly kind: PortalKind;
  /** `conflict`: another Service holds the claim and this one waits for it to be released. */
  state: 'none' | 'open' | 'conflict' | 'failed';
  /** The listener's proxy socket, once opened. */
  info?: ServiceInfoImpl | undefined;
}

/** What both modes keep per served Service port. */
export interface ModeEntry {
  /** The spec being served; replaced in place for TTL-only and uid-only changes. */
  spec: ServicePortSpec;
  /** True once `lb.newService` has been called for this entry. */
  lbKnown: boolean;
}

/**
 * How many Service ports that failed to open (a socket that could not bind, a portal rule that
 * failed) one sync retries, besides those it is working on anyway. Failed ports are retried in
 * turn, so every one gets another chance every few periodic syncs, and a sync never turns into a
 * sweep over every Service (the reference's `ensurePortals`, kubernetes#26148).
 */
export const MAX_RETRIES_PER_SYNC = 32;

/**
 * The part of the Proxier that differs between capture modes: what is opened for one Service port.
 * The base class holds what is the same: one entry per Service port, deciding between keeping,
 * updating in place and re-creating, the load-balancer registration, the lifecycle of infos, the
 * retry of what failed, and conntrack bookkeeping for UDP ports that go away. Work is per entry: a
 * sync only ever touches the entries its changes (and its bounded retries) name.
 */
export abstract class ServicePortMode<E extends ModeEntry> {
  /** Which capture mode this is. */
  abstract readonly mode: ProxyMode;
  protected readonly ctx: ProxierContext;
  protected readonly entries = new Map<string, E>();
  /** Keys of entries with something not open, in the order they are retried. */
  readonly #failed = new Set<string>();

  constructor(ctx: ProxierContext) {
    this.ctx = ctx;
  }

  /** A new, not yet opened entry for `spec`. */
  protected abstract newEntry(spec: ServicePortSpec): E;
  /** Opens whatever of the entry is not open yet; true when nothing is left failed. */
  protected abstract ensure(entry: E, run: SyncRun): Promise<boolean>;
  /** Closes everything the entry opened and releases its claims; never throws. */
  protected abstract teardown(entry: E, run: SyncRun): Promise<void>;
  /** Every info the entry holds (started together, updated in place together). */
  protected abstract entryInfos(entry: E): ServiceInfoImpl[];
  /** The infos the Proxier reports through `serviceInfos()`. */
  protected abstract publicInfos(entry: E): ServiceInfo[];
  /** The info for `getServiceInfo(svcPort, portalIP)`. */
  protected abstract lookup(entry: E, portalIP: string | undefined): ServiceInfo | undefined;

  /** Makes the Service port match `spec`: nothing, an in-place update, a first open or a re-creation. */
  async apply(spec: ServicePortSpec, run: SyncRun): Promise<void> {
    const entry = this.entries.get(spec.key);
    if (entry !== undefined) {
      const change = compareSpecs(entry.spec, spec);
      if (change !== 'recreate') {
        if (change === 'in-place') this.#updateInPlace(entry, spec);
        if (this.#failed.has(spec.key)) await this.#ensure(entry, run);
        return;
      }
      this.ctx.log.info(`${spec.key} changed; re-creating its proxy`);
      await this.#stop(entry, run);
    } else {
      this.ctx.log.debug(`adding ${spec.key} (${spec.protocol} ${spec.clusterIP}:${spec.port})`);
    }
    const fresh = this.newEntry(spec);
    this.entries.set(spec.key, fresh);
    await this.#ensure(fresh, run);
  }

  /** Stops serving a Service port and makes the load balancer forget it. */
  async remove(key: string, run: SyncRun): Promise<void> {
    const entry = this.entries.get(key);
    if (entry === undefined) return;
    this.ctx.log.info(`stopping ${key}`);
    await this.#stop(entry, run);
    try {
      this.ctx.lb.deleteService(entry.spec.name);
    } catch (error) {
      this.ctx.log.error(`the load balancer failed to delete ${key}`, error);
    }
  }

  /**
   * Retries, in this order: the entries waiting for a port that was released during this sync (all
   * of them, each once), then up to `max` of the entries that failed in an earlier sync and were not
   * tried again in this one.
   */
  async retryPending(run: SyncRun, max: number): Promise<void> {
    const done = new Set<string>();
    for (;;) {
      const next = first(run.retry);
      if (next === undefined) break;
      run.retry.delete(next);
      if (done.has(next)) continue;
      done.add(next);
      const entry = this.entries.get(next);
      if (entry !== undefined) await this.#ensure(entry, run);
    }
    let budget = max;
    for (const key of [...this.#failed]) {
      if (budget <= 0) break;
      if (done.has(key) || run.attempted.has(key)) continue;
      budget--;
      // Deleted first so that a port failing again goes to the back of the queue.
      this.#failed.delete(key);
      const entry = this.entries.get(key);
      if (entry !== undefined) await this.#ensure(entry, run);
    }
  }

  /** The specs being served, for the per-sync sticky-session cleanup. */
  *specs(): IterableIterator<ServicePortSpec> {
    for (const entry of this.entries.values()) yield entry.spec;
  }

  /** How many Service ports are being served (or retried). */
  get size(): number {
    return this.entries.size;
  }

  /** See `Proxier.getServiceInfo`. */
  getServiceInfo(key: string, portalIP?: string): ServiceInfo | undefined {
    const entry = this.entries.get(key);
    return entry === undefined ? undefined : this.lookup(entry, portalIP);
  }

  /** See `Proxier.serviceInfos`. */
  serviceInfos(): ServiceInfo[] {
    return [...this.entries.values()].flatMap((entry) => this.publicInfos(entry));
  }

  /** Closes every entry; the load balancer keeps its state. */
  async shutdown(run: SyncRun): Promise<void> {
    const entries = [...this.entries.values()];
    this.entries.clear();
    this.#failed.clear();
    for (const entry of entries) await this.#teardown(entry, run);
  }

  /**
   * Claims a listener's address and opens its proxy socket; true unless something failed (a failure
   * is recorded as an event and retried by a later sync). A conflict is not a failure: the listener
   * waits for the port, and the conflict is reported at the end of the sync if it still stands.
   * `prepare` runs once the claim is held (making the address bindable), `undo` after a failed open.
   */
  protected async openListener(
    spec: ServicePortSpec,
    listener: Listener,
    run: SyncRun,
    prepare?: () => Promise<void>,
    undo?: () => Promise<void>,
  ): Promise<boolean> {
    const { ip, port, kind } = listener;
    const result = this.ctx.claims.claim(ip, port, spec.protocol, spec.key);
    if (!result.ok) {
      if (listener.state !== 'conflict') {
        run.conflict(spec.serviceRef, result.error.message, () => listener.state === 'conflict');
      }
      listener.state = 'conflict';
      return true;
    }
    const fail = (reason: string, error: unknown): false => {
      listener.state = 'failed';
      run.retryOwners(this.ctx.claims.release(ip, port, spec.protocol, spec.key));
      this.warn(spec, reason, error);
      return false;
    };
    try {
      await prepare?.();
    } catch (cause) {
      const error = new PortalError(`${spec.key} on ${ip}`, 'open', { cause });
      return fail(PROXIER_EVENT_REASONS.portalFailed, error);
    }
    try {
      const portal = { ip: ip ?? '', port, isExternal: kind === 'external-ip' };
      // A load-balancer IP's listener admits only its source ranges (in redirect mode, the
      // load-balancer IPs behind rules go to a filtered socket of their own: mode-redirect.ts).
      const allowed = kind === 'load-balancer' ? spec.loadBalancerSourceRanges : undefined;
      listener.info = await this.ctx.openProxy(spec, ip, port, portal, allowed);
      listener.state = 'open';
      return true;
    } catch (error) {
      await undo?.();
      return fail(PROXIER_EVENT_REASONS.socketOpenFailed, error);
    }
  }

  /** Closes a listener and gives its claim back (the Services waiting for it are retried). */
  protected async closeListener(
    spec: ServicePortSpec,
    listener: Listener,
    run: SyncRun,
  ): Promise<void> {
    if (listener.state === 'open' && listener.info !== undefined) {
      await this.ctx.closeProxy(listener.info, spec.key);
      run.retryOwners(this.ctx.claims.release(listener.ip, listener.port, spec.protocol, spec.key));
    } else if (listener.state === 'conflict') {
      this.ctx.claims.withdraw(listener.port, spec.protocol, spec.key);
    }
    listener.state = 'none';
  }

  /** Records a Warning event on the Service for something that failed, and logs it. */
  protected warn(spec: ServicePortSpec, reason: string, error: unknown): void {
    const message = error instanceof Error ? error.message : String(error);
    this.ctx.record(spec.serviceRef, 'Warning', reason, `${spec.key}: ${message}`);
  }

  async #ensure(entry: E, run: SyncRun): Promise<void> {
    const { key } = entry.spec;
    run.attempted.add(key);
    let complete = false;
    try {
      complete = await this.ensure(entry, run);
    } catch (error) {
      this.ctx.log.error(`opening ${key} failed`, error);
    }
    if (!entry.lbKnown) {
      try {
        const { name, affinity, stickyMaxAgeSeconds } = entry.spec;
        this.ctx.lb.newService(name, affinity, stickyMaxAgeSeconds);
        entry.lbKnown = true;
      } catch (error) {
        complete = false;
        this.ctx.log.error(`the load balancer refused ${key}`, error);
      }
    }
    if (entry.lbKnown) for (const info of this.entryInfos(entry)) info.setStarted();
    if (complete) this.#failed.delete(key);
    else this.#failed.add(key);
  }

  #updateInPlace(entry: E, spec: ServicePortSpec): void {
    const ttlChanged = entry.spec.stickyMaxAgeSeconds !== spec.stickyMaxAgeSeconds;
    entry.spec = spec;
    for (const info of this.entryInfos(entry)) {
      info.setServiceRef(spec.serviceRef);
      info.setStickyMaxAgeSeconds(spec.stickyMaxAgeSeconds);
    }
    if (ttlChanged && entry.lbKnown) {
      try {
        this.ctx.lb.newService(spec.name, spec.affinity, spec.stickyMaxAgeSeconds);
      } catch (error) {
        this.ctx.log.error(`the load balancer refused the new affinity TTL of ${spec.key}`, error);
      }
    }
  }

  /** Tears an entry down and forgets it; a UDP port's addresses are queued for conntrack. */
  async #stop(entry: E, run: SyncRun): Promise<void> {
    this.entries.delete(entry.spec.key);
    this.#failed.delete(entry.spec.key);
    await this.#teardown(entry, run);
    if (entry.spec.protocol === 'UDP') {
      for (const ip of specAddresses(entry.spec)) run.staleUdpIPs.add(ip);
    }
  }

  async #teardown(entry: E, run: SyncRun): Promise<void> {
    try {
      await this.teardown(entry, run);
    } catch (error) {
      this.ctx.log.error(`closing ${entry.spec.key} failed`, error);
    }
  }
}

function first<T>(set: Set<T>): T | undefined {
  for (const value of set) return value;
  return undefined;
}
