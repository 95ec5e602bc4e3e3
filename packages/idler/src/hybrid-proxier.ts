// This file is longer than 400 lines because it forwards the whole Proxier interface (three
// handler contracts and the lifecycle) and its switch state machine acts on one per-Service state
// that splitting would expose between modules.
import diagnosticsChannel from 'node:diagnostics_channel';
import {
  type ConntrackCleaner,
  componentLogger,
  type DrainResult,
  type EndpointSlice,
  type Endpoints,
  type Logger,
  NoopConntrackCleaner,
  noopLogger,
  type Proxier,
  type ProxyMode,
  type Service,
  type ServiceInfo,
  type ServicePortName,
} from '@userspace-proxy/core';
import { CHANNELS } from '@userspace-proxy/core/diagnostics';
import type { Idler } from './idler.js';
import {
  type EndpointsSourceKind,
  isEmptySource,
  isIdledService,
  SERVICE_NAME_LABEL,
  serviceAddresses,
  servicePorts,
} from './idling-predicates.js';

/** Options of {@link HybridProxier}. */
export interface HybridProxierOptions {
  /** Serves every Service that is not idled. */
  main: Proxier;
  /** Serves idled Services: a Proxier whose socket factory is `createIdlingProxySocketFactory`. */
  idling: Proxier;
  /** The Idler behind `idling`'s sockets: whether it still holds clients, and who to tell. */
  idler: Idler;
  /**
   * Clears the kernel's UDP flows of a Service's addresses after each switch, once the new owner
   * serves it (flows remember the old owner's NAT otherwise). Default: none.
   */
  conntrack?: ConntrackCleaner;
  /** Named `hybrid`. Default: silent. */
  logger?: Logger;
}

/** One endpoints source of a Service: a slice (by name) or its legacy Endpoints object. */
interface Source {
  readonly kind: EndpointsSourceKind;
  object: EndpointSlice | Endpoints;
  /** No endpoint core would use. */
  empty: boolean;
}

type Owner = 'main' | 'idling';

interface State {
  namespace: string;
  name: string;
  service: Service | undefined;
  /** The proxier that has been given the Service (add) and not its delete, and what it was given. */
  delivered: { owner: Owner; service: Service } | undefined;
  /** Where the Service belongs now. */
  isIdled: boolean;
  sources: Map<string, Source>;
  /** Sources the idling proxier has been given. */
  idlerSources: Set<string>;
  /**
   * A switch under way: `releasing` waits for the old owner to close its listeners before the new
   * one is given the Service (both may want the same address); `opening` waits for the new owner
   * to serve it before clearing UDP conntrack.
   */
  switching: { phase: 'releasing' | 'opening'; to: Owner } | undefined;
}

/**
 * Wraps a main proxier and an idling one and moves each Service between them, as openshift-sdn's
 * hybrid proxier does (docs/idling.md): a Service goes to the idling proxier when it has the
 * `idled-at` annotation and no usable endpoint, and back when either stops being true. The main
 * proxier gets every endpoints event; the idling one gets them while it owns the Service and for as
 * long as its Idler still holds clients of it (not a fixed minute), and its Idler is told after each.
 *
 * A switch gives the old owner the delete first and the new owner the add once the old one has
 * closed its listeners (both may bind the same address), watching core's `sync` channel instead of
 * polling; then, when the new owner serves it, UDP conntrack of the Service's addresses is cleared.
 */
export class HybridProxier implements Proxier {
  readonly #main: Proxier;
  readonly #idling: Proxier;
  readonly #idler: Idler;
  readonly #conntrack: ConntrackCleaner;
  readonly #log: Logger;
  readonly #states = new Map<string, State>();
  readonly #onSync = (): void => this.#advanceSwitches();
  #stopped = false;

  constructor(options: HybridProxierOptions) {
    this.#main = options.main;
    this.#idling = options.idling;
    this.#idler = options.idler;
    this.#conntrack = options.conntrack ?? new NoopConntrackCleaner();
    this.#log = componentLogger(options.logger ?? noopLogger, 'hybrid');
    diagnosticsChannel.subscribe(CHANNELS.sync, this.#onSync);
  }

  /** The main proxier's mode. */
  get mode(): ProxyMode {
    return this.#main.mode;
  }

  /** True when the Service `namespace/name` is owned by the idling proxier now. */
  isIdled(namespace: string, name: string): boolean {
    return this.#states.get(`${namespace}/${name}`)?.isIdled ?? false;
  }

  // --- ServiceHandler ---

  onServiceAdd(service: Service): void {
    const state = this.#state(service.metadata.namespace, service.metadata.name);
    state.service = service;
    if (state.delivered === undefined && state.switching === undefined) {
      state.isIdled = this.#shouldBeIdled(state);
      if (state.isIdled) this.#feedIdler(state);
      this.#deliver(state, state.isIdled ? 'idling' : 'main');
    } else {
      this.#update(state);
    }
    this.#release(state);
  }

  onServiceUpdate(_oldService: Service, service: Service): void {
    const state = this.#state(service.metadata.namespace, service.metadata.name);
    state.service = service;
    if (this.#shouldBeIdled(state) === state.isIdled) this.#update(state);
    // Held clients of a port the Service no longer has would wait for nothing.
    this.#idler.serviceChanged(state.namespace, state.name, service);
    this.#release(state);
  }

  onServiceDelete(service: Service): void {
    const state = this.#state(service.metadata.namespace, service.metadata.name);
    state.service = undefined;
    state.switching = undefined;
    if (state.delivered !== undefined) {
      this.#proxier(state.delivered.owner).onServiceDelete(state.delivered.service);
      state.delivered = undefined;
    }
    state.isIdled = false;
    this.#idler.serviceChanged(state.namespace, state.name);
    this.#release(state);
  }

  onServiceSynced(): void {
    this.#main.onServiceSynced();
    this.#idling.onServiceSynced();
  }

  // --- EndpointSliceHandler ---

  onEndpointSliceAdd(slice: EndpointSlice): void {
    this.#main.onEndpointSliceAdd(slice);
    this.#sourceEvent(slice, 'slice', false);
  }

  onEndpointSliceUpdate(oldSlice: EndpointSlice, slice: EndpointSlice): void {
    this.#main.onEndpointSliceUpdate(oldSlice, slice);
    this.#sourceEvent(slice, 'slice', false);
  }

  onEndpointSliceDelete(slice: EndpointSlice): void {
    this.#main.onEndpointSliceDelete(slice);
    this.#sourceEvent(slice, 'slice', true);
  }

  onEndpointSlicesSynced(): void {
    this.#main.onEndpointSlicesSynced();
    this.#idling.onEndpointSlicesSynced();
  }

  // --- EndpointsHandler ---

  onEndpointsAdd(endpoints: Endpoints): void {
    this.#main.onEndpointsAdd(endpoints);
    this.#sourceEvent(endpoints, 'endpoints', false);
  }

  onEndpointsUpdate(oldEndpoints: Endpoints, endpoints: Endpoints): void {
    this.#main.onEndpointsUpdate(oldEndpoints, endpoints);
    this.#sourceEvent(endpoints, 'endpoints', false);
  }

  onEndpointsDelete(endpoints: Endpoints): void {
    this.#main.onEndpointsDelete(endpoints);
    this.#sourceEvent(endpoints, 'endpoints', true);
  }

  onEndpointsSynced(): void {
    this.#main.onEndpointsSynced();
    this.#idling.onEndpointsSynced();
  }

  // --- Proxier ---

  sync(): void {
    this.#main.sync();
    this.#idling.sync();
  }

  async syncLoop(signal?: AbortSignal): Promise<void> {
    await Promise.all([this.#main.syncLoop(signal), this.#idling.syncLoop(signal)]);
  }

  getServiceInfo(svcPort: ServicePortName, portalIP?: string): ServiceInfo | undefined {
    return (
      this.#main.getServiceInfo(svcPort, portalIP) ?? this.#idling.getServiceInfo(svcPort, portalIP)
    );
  }

  serviceInfos(): ServiceInfo[] {
    return [...this.#main.serviceInfos(), ...this.#idling.serviceInfos()];
  }

  isInitialized(): boolean {
    return this.#main.isInitialized() && this.#idling.isInitialized();
  }

  /** Changes both proxiers wait to sync, plus switches under way. */
  pendingChanges(): number {
    let switching = 0;
    for (const state of this.#states.values()) if (state.switching !== undefined) switching++;
    return this.#main.pendingChanges() + this.#idling.pendingChanges() + switching;
  }

  /**
   * Drains both proxiers. The Idler is closed first: its held clients are refused at once (RST when
   * they sent bytes), so they can retry elsewhere, instead of waiting for endpoints that a stopping
   * proxier would never hand them to and being reset at the deadline. Hand-overs already dialling
   * are connections like any other and are drained as such.
   */
  async drain(deadlineMs: number): Promise<DrainResult> {
    this.#idler.close();
    const [a, b] = await Promise.all([
      this.#main.drain(deadlineMs),
      this.#idling.drain(deadlineMs),
    ]);
    return { remaining: a.remaining + b.remaining, timedOut: a.timedOut || b.timedOut };
  }

  /** Shuts both proxiers down; the Idler is closed (idempotent) so no held client outlives them. */
  async shutdown(): Promise<void> {
    this.#idler.close();
    if (!this.#stopped) {
      this.#stopped = true;
      diagnosticsChannel.unsubscribe(CHANNELS.sync, this.#onSync);
    }
    await Promise.all([this.#main.shutdown(), this.#idling.shutdown()]);
  }

  // --- internals ---

  #state(namespace: string | undefined, name: string): State {
    const ns = namespace || 'default';
    const key = `${ns}/${name}`;
    let state = this.#states.get(key);
    if (state === undefined) {
      state = {
        namespace: ns,
        name,
        service: undefined,
        delivered: undefined,
        isIdled: false,
        sources: new Map(),
        idlerSources: new Set(),
        switching: undefined,
      };
      this.#states.set(key, state);
    }
    return state;
  }

  #proxier(owner: Owner): Proxier {
    return owner === 'main' ? this.#main : this.#idling;
  }

  #shouldBeIdled(state: State): boolean {
    if (state.service === undefined || !isIdledService(state.service)) return false;
    if (state.sources.size === 0) return false;
    for (const source of state.sources.values()) if (!source.empty) return false;
    return true;
  }

  /** The idling proxier wants endpoints while it owns the Service or still holds its clients. */
  #idlerWants(state: State): boolean {
    return state.isIdled || this.#idler.holds(state.namespace, state.name);
  }

  #sourceEvent(object: EndpointSlice | Endpoints, kind: Source['kind'], deleted: boolean): void {
    const serviceName =
      kind === 'slice' ? object.metadata.labels?.[SERVICE_NAME_LABEL] : object.metadata.name;
    if (serviceName === undefined || serviceName === '') return;
    const state = this.#state(object.metadata.namespace, serviceName);
    const id = `${kind}:${object.metadata.name}`;
    const wanted = this.#idlerWants(state);
    const wasIdled = state.isIdled;
    if (deleted) {
      state.sources.delete(id);
      if (state.idlerSources.delete(id)) this.#toIdler(kind, object, 'delete');
    } else {
      const previous = state.sources.get(id)?.object;
      state.sources.set(id, { kind, object, empty: isEmptySource(object, kind) });
      // Leaving the idling proxier: drop (and count) its UDP buffer before the endpoints reach it.
      if (wasIdled && !this.#shouldBeIdled(state)) {
        this.#idler.switchingToMain(state.namespace, state.name);
      }
      if (wanted) {
        if (previous !== undefined && state.idlerSources.has(id)) {
          this.#toIdler(kind, object, 'update', previous);
        } else {
          this.#toIdler(kind, object, 'add');
        }
        state.idlerSources.add(id);
      }
    }
    if (wanted) {
      this.#idler.endpointsChanged(state.namespace, state.name);
    } else if (state.idlerSources.size > 0) {
      // The idling proxier holds nobody of this Service any more: it forgets its endpoints.
      for (const other of state.idlerSources) {
        const source = state.sources.get(other);
        if (source !== undefined) this.#toIdler(source.kind, source.object, 'delete');
      }
      state.idlerSources.clear();
    }
    this.#release(state);
  }

  #toIdler(
    kind: Source['kind'],
    object: EndpointSlice | Endpoints,
    op: 'add' | 'update' | 'delete',
    previous: EndpointSlice | Endpoints = object,
  ): void {
    const p = this.#idling;
    if (kind === 'slice') {
      const slice = object as EndpointSlice;
      if (op === 'add') p.onEndpointSliceAdd(slice);
      else if (op === 'update') p.onEndpointSliceUpdate(previous as EndpointSlice, slice);
      else p.onEndpointSliceDelete(slice);
    } else {
      const endpoints = object as Endpoints;
      if (op === 'add') p.onEndpointsAdd(endpoints);
      else if (op === 'update') p.onEndpointsUpdate(previous as Endpoints, endpoints);
      else p.onEndpointsDelete(endpoints);
    }
  }

  /** Gives the idling proxier every source of the Service it has not had yet. */
  #feedIdler(state: State): void {
    for (const [id, source] of state.sources) {
      if (state.idlerSources.has(id)) continue;
      this.#toIdler(source.kind, source.object, 'add');
      state.idlerSources.add(id);
    }
  }

  /**
   * The idling proxier dropped the Service's ports from its load balancer when it stopped serving
   * them (core forgets a removed port's rotation); while its Idler still holds clients, the
   * endpoints are given again, so that those clients can be dialled, and the Idler is told.
   */
  #refeedIdler(state: State): void {
    if (!this.#idler.holds(state.namespace, state.name)) return;
    for (const id of state.idlerSources) {
      const source = state.sources.get(id);
      if (source === undefined) continue;
      this.#toIdler(source.kind, source.object, 'delete');
      this.#toIdler(source.kind, source.object, 'add');
    }
    this.#idler.endpointsChanged(state.namespace, state.name);
  }

  #deliver(state: State, owner: Owner): void {
    if (state.service === undefined) return;
    this.#proxier(owner).onServiceAdd(state.service);
    state.delivered = { owner, service: state.service };
  }

  #update(state: State): void {
    const delivered = state.delivered;
    if (delivered === undefined || state.service === undefined) return;
    this.#proxier(delivered.owner).onServiceUpdate(delivered.service, state.service);
    delivered.service = state.service;
  }

  /** The release step: switch the owner when the predicate says so; forget what is gone. */
  #release(state: State): void {
    if (state.service !== undefined) {
      const idle = this.#shouldBeIdled(state);
      if (idle !== state.isIdled) this.#switch(state, idle ? 'idling' : 'main');
    } else if (state.sources.size === 0 && state.delivered === undefined) {
      this.#states.delete(`${state.namespace}/${state.name}`);
    }
  }

  #switch(state: State, to: Owner): void {
    const key = `${state.namespace}/${state.name}`;
    state.isIdled = to === 'idling';
    this.#log.info(
      `switching Service ${key} to the ${to === 'idling' ? 'idling' : 'main'} proxier`,
    );
    if (to === 'idling') this.#feedIdler(state);
    const delivered = state.delivered;
    if (delivered !== undefined && delivered.owner !== to) {
      const from = this.#proxier(delivered.owner);
      from.onServiceDelete(delivered.service);
      state.delivered = undefined;
      state.switching = { phase: 'releasing', to };
      from.sync();
    } else if (delivered === undefined) {
      // The add never reached the old owner (a switch back before it was released): give it now.
      state.switching = { phase: 'releasing', to };
    } else {
      this.#update(state);
      state.switching = { phase: 'opening', to };
    }
    this.#advance(state);
  }

  #advanceSwitches(): void {
    for (const state of [...this.#states.values()]) {
      if (state.switching !== undefined) this.#advance(state);
    }
  }

  #advance(state: State): void {
    const switching = state.switching;
    const service = state.service;
    if (switching === undefined) return;
    if (service === undefined) {
      state.switching = undefined;
      return;
    }
    const ports = servicePorts(service);
    if (switching.phase === 'releasing') {
      const from = this.#proxier(switching.to === 'main' ? 'idling' : 'main');
      if (ports.some((port) => from.getServiceInfo(port) !== undefined)) return;
      if (switching.to === 'main') this.#refeedIdler(state);
      this.#deliver(state, switching.to);
      // Set before asking for the sync: a sync may report (and call back here) before it returns.
      switching.phase = 'opening';
      this.#proxier(switching.to).sync();
      if (state.switching !== switching) return;
    }
    const to = this.#proxier(switching.to);
    if (ports.some((port) => to.getServiceInfo(port) === undefined)) return;
    state.switching = undefined;
    void this.#clearConntrack(service);
  }

  async #clearConntrack(service: Service): Promise<void> {
    const ports = service.spec.ports ?? [];
    if (!ports.some((port) => (port.protocol ?? 'TCP').toUpperCase() === 'UDP')) return;
    for (const ip of serviceAddresses(service)) {
      try {
        await this.#conntrack.clearEntriesForIP(ip, 'UDP');
      } catch (error) {
        this.#log.error(`failed to delete the UDP flows to ${ip}`, error);
      }
    }
  }
}
