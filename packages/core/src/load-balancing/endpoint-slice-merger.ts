import type { EndpointSliceHandler, EndpointsHandler } from '../config/handlers.js';
import { componentLogger, type Logger } from '../logger.js';
import { logSafe } from '../model/log-safe.js';
import { type EndpointSlice, type Endpoints, SERVICE_NAME_LABEL } from '../model/model.js';
import {
  DEFAULT_NAMESPACE,
  namespacedKey,
  tryObjectKey,
  tryObjectName,
} from '../model/object-key.js';
import { rememberEndpointLists } from './endpoints-map.js';
import {
  listsOf,
  mergeSlices,
  parseSlice,
  type SliceContribution,
  sameLists,
  syntheticEndpoints,
} from './slice-contributions.js';

/** Options of {@link EndpointSliceMerger}. */
export interface EndpointSliceMergerOptions {
  /** tslog-compatible; default silent. */
  logger?: Logger;
}

/**
 * A Service's slices keyed by "ns/slice": the part of a Map the merger uses, holding its only slice
 * (what nearly every Service has: up to 100 endpoints per slice) in two fields and making a Map
 * only for a second one. A Map costs about 300 bytes; at 10 000 Services, 3 MB.
 */
class SliceSet {
  #onlyKey: string | undefined;
  #only: SliceContribution | undefined;
  #many: Map<string, SliceContribution> | undefined;

  get size(): number {
    return this.#many ? this.#many.size : this.#onlyKey === undefined ? 0 : 1;
  }

  set(key: string, slice: SliceContribution): void {
    if (this.#many) this.#many.set(key, slice);
    else if (this.#onlyKey === undefined || this.#onlyKey === key) {
      this.#onlyKey = key;
      this.#only = slice;
    } else {
      this.#many = new Map([[this.#onlyKey, this.#only as SliceContribution]]);
      this.#many.set(key, slice);
      this.#onlyKey = undefined;
      this.#only = undefined;
    }
  }

  delete(key: string): void {
    if (this.#many) this.#many.delete(key);
    else if (this.#onlyKey === key) {
      this.#onlyKey = undefined;
      this.#only = undefined;
    }
  }

  values(): Iterable<SliceContribution> {
    if (this.#many) return this.#many.values();
    return this.#only === undefined ? [] : [this.#only];
  }
}

/** Everything known about one Service: its slices and what was last delivered for them. */
interface ServiceSlices {
  namespace: string;
  name: string;
  slices: SliceSet;
  /** The merged per-port lists last delivered; undefined before the first delivery. */
  merged: Map<string, string[]> | undefined;
  /** The synthetic Endpoints object last delivered. */
  delivered: Endpoints | undefined;
}

/**
 * Merges the EndpointSlices of each Service into one Endpoints-shaped object and hands it to an
 * {@link EndpointsHandler} (the load balancer), so that everything downstream has a single code
 * path whether the source watches EndpointSlices or legacy Endpoints. Kubernetes ≥ 1.21 clusters
 * may serve only EndpointSlices, and a userspace proxy that waited for Endpoints never initialised
 * there (kubernetes#100880); this class is what makes slices first-class.
 *
 * Merge rules, per Service and port name: the ready endpoints of all its slices (an absent `ready`
 * counts as ready, as in Kubernetes); when a port has no ready endpoint, the endpoints that are
 * serving and terminating instead (as current kube-proxy does, so that connections drain to pods
 * shutting down rather than fail); FQDN slices, slice ports without a port number and invalid
 * addresses are ignored; an endpoint's first address is the one used (the API says addresses are
 * fungible); an address listed by several slices counts once.
 *
 * Nothing is delivered when the merged lists did not change, so informer resyncs and slice updates
 * that only touch other fields (hints, zones, node names) cost nothing downstream. Updating one
 * Service costs O(its slices), whatever the number of Services.
 */
export class EndpointSliceMerger implements EndpointSliceHandler {
  readonly #target: EndpointsHandler;
  readonly #log: Logger;
  /** Keyed by "ns/service". */
  readonly #services = new Map<string, ServiceSlices>();
  /** "ns/slice" → the "ns/service" it is stored under, so a delete needs no trustworthy labels. */
  readonly #sliceOwner = new Map<string, string>();

  constructor(target: EndpointsHandler, options: EndpointSliceMergerOptions = {}) {
    this.#target = target;
    this.#log = componentLogger(options.logger, 'endpoint-slice-merger');
  }

  /** Stores the slice and delivers its Service's merged endpoints if they changed. */
  onEndpointSliceAdd(slice: EndpointSlice): void {
    this.#upsert(slice);
  }

  /** As an add: the new slice replaces whatever was stored under its name. */
  onEndpointSliceUpdate(_oldSlice: EndpointSlice, slice: EndpointSlice): void {
    this.#upsert(slice);
  }

  /** Forgets the slice; when it was its Service's last one, the Service's Endpoints are deleted. */
  onEndpointSliceDelete(slice: EndpointSlice): void {
    const key = tryObjectKey(slice);
    if (key !== undefined) this.#remove(key);
  }

  /** Passed on: once slices have synced, the merged Endpoints have too. */
  onEndpointSlicesSynced(): void {
    this.#target.onEndpointsSynced();
  }

  /**
   * The synthetic Endpoints object last delivered for a Service, for inspection and tests; undefined
   * when the Service has no stored slice.
   */
  endpointsFor(namespace: string, name: string): Endpoints | undefined {
    return this.#services.get(namespacedKey(namespace, name))?.delivered;
  }

  /**
   * The Services that a set of objects gives both an Endpoints object and at least one EndpointSlice,
   * as "ns/name" keys in first-seen order: what a manifest must not do (docs/api.md). The Proxier
   * copes (slices win, see EndpointsIntake), but a manifest naming both is ambiguous, so the daemon
   * rejects it with one message per Service. Objects without a readable name or Service label are
   * skipped (validation reports those).
   */
  static servicesWithBothSources(
    endpoints: readonly Endpoints[],
    slices: readonly EndpointSlice[],
  ): string[] {
    const legacy = new Set<string>();
    for (const e of endpoints) {
      const key = tryObjectKey(e);
      if (key !== undefined) legacy.add(key);
    }
    const both = new Set<string>();
    for (const s of slices) {
      const service = s.metadata?.labels?.[SERVICE_NAME_LABEL];
      if (typeof service !== 'string') continue;
      const key = `${s.metadata.namespace || DEFAULT_NAMESPACE}/${service}`;
      if (legacy.has(key)) both.add(key);
    }
    return [...both];
  }

  #upsert(slice: EndpointSlice): void {
    const id = tryObjectName(slice);
    if (id === undefined) {
      this.#log.debug('ignoring EndpointSlice without metadata.name');
      return;
    }
    const { key, namespace } = id;
    const serviceName = owningService(slice);
    let contribution: SliceContribution | undefined;
    if (typeof serviceName !== 'string') {
      this.#log.debug(`ignoring EndpointSlice ${logSafe(key)}: ${serviceName.ignored}`);
    } else {
      try {
        contribution = parseSlice(slice, key, this.#log);
      } catch (error) {
        // Only a hostile object (a throwing getter, a revoked Proxy) gets here.
        this.#log.debug(`ignoring unreadable EndpointSlice ${logSafe(key)}`, error);
      }
    }
    if (typeof serviceName !== 'string' || contribution === undefined) {
      this.#remove(key);
      return;
    }
    const service = namespacedKey(namespace, serviceName);
    const previous = this.#sliceOwner.get(key);
    if (previous !== undefined && previous !== service) this.#remove(key);
    let entry = this.#services.get(service);
    if (entry === undefined) {
      entry = {
        namespace,
        name: serviceName,
        slices: new SliceSet(),
        merged: undefined,
        delivered: undefined,
      };
      this.#services.set(service, entry);
    }
    entry.slices.set(key, contribution);
    this.#sliceOwner.set(key, service);
    this.#deliver(entry, service);
  }

  #remove(sliceKeyText: string): void {
    const service = this.#sliceOwner.get(sliceKeyText);
    if (service === undefined) return;
    this.#sliceOwner.delete(sliceKeyText);
    const entry = this.#services.get(service);
    if (entry === undefined) return;
    entry.slices.delete(sliceKeyText);
    this.#deliver(entry, service);
  }

  #deliver(entry: ServiceSlices, service: string): void {
    if (entry.slices.size === 0) {
      this.#services.delete(service);
      if (entry.delivered !== undefined)
        this.#call('delete', () => this.#target.onEndpointsDelete(entry.delivered as Endpoints));
      return;
    }
    const view = mergeSlices(entry.slices.values());
    const merged = listsOf(view);
    const old = entry.delivered;
    if (old !== undefined && entry.merged !== undefined && sameLists(entry.merged, merged)) return;
    const next = syntheticEndpoints(entry.namespace, entry.name, view, merged);
    // The balancer turns `next` back into these very lists: let it share them.
    rememberEndpointLists(next, merged);
    entry.merged = merged;
    entry.delivered = next;
    if (old === undefined) this.#call('add', () => this.#target.onEndpointsAdd(next));
    else this.#call('update', () => this.#target.onEndpointsUpdate(old, next));
  }

  /** A throwing target must not leave the merger half-updated or stop the informer. */
  #call(what: string, deliver: () => void): void {
    try {
      deliver();
    } catch (error) {
      this.#log.error(`endpoints handler failed on ${what}`, error);
    }
  }
}

/** The Service a slice belongs to, or why the slice is ignored. Never throws. */
function owningService(slice: EndpointSlice): string | { ignored: string } {
  try {
    const labels: unknown = slice.metadata.labels;
    const name =
      typeof labels === 'object' && labels !== null
        ? (labels as Record<string, unknown>)[SERVICE_NAME_LABEL]
        : undefined;
    if (typeof name !== 'string' || name === '')
      return { ignored: `no ${SERVICE_NAME_LABEL} label` };
    // FQDN slices name hosts, not addresses: the proxy cannot dial them (neither can kube-proxy).
    if (slice.addressType !== 'IPv4' && slice.addressType !== 'IPv6') {
      return { ignored: 'addressType is not IPv4 or IPv6' };
    }
    return name;
  } catch {
    return { ignored: 'it cannot be read' };
  }
}
