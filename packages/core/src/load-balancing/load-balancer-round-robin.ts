import { InvalidOptionError, MissingEndpointsError, MissingServiceEntryError } from '../errors.js';
import { componentLogger, type Logger } from '../logger.js';
import { type Addr, DEFAULT_CLIENT_IP_AFFINITY_SECONDS, type Endpoints } from '../model/model.js';
import { namespacedKey, tryObjectName } from '../model/object-key.js';
import { type ServicePortName, servicePortNameString } from '../model/service-port-name.js';
import { buildPortsToEndpointsMap } from './endpoints-map.js';
import type { AffinityType, LoadBalancer } from './load-balancer.js';
import { BalancerState } from './load-balancer-state.js';
import {
  type OutlierEjectionOptions,
  type OutlierSettings,
  OutlierTracker,
  outlierSettings,
} from './outlier-ejection.js';
import type { RandomSource } from './random.js';

/**
 * The default cap on ClientIP affinity records per Service port. Without one, a UDP Service with
 * affinity grows a record per spoofed source address for the whole TTL (3 h by default); 100 000
 * records cost about 15 MB. At the cap the record assigned longest ago is evicted.
 */
export const DEFAULT_MAX_AFFINITY_RECORDS = 100_000;

/** Options of {@link RoundRobinLoadBalancer}; every one has a default. */
export interface RoundRobinLoadBalancerOptions {
  /** Source for the endpoint shuffles. Default `Math.random`; pass `mulberry32(seed)` in tests. */
  random?: RandomSource;
  /**
   * Clock in ms for affinity TTLs. Default `performance.now`: monotonic, as Go's `time.Since` is, so
   * a wall-clock step (NTP, a VM resumed) neither drops every client's endpoint nor pins it for hours.
   */
  now?: () => number;
  /** ClientIP affinity records kept per Service port. Default {@link DEFAULT_MAX_AFFINITY_RECORDS}. */
  maxAffinityRecords?: number;
  /**
   * Passive outlier ejection: endpoints that fail consecutive dials leave the rotation for a growing
   * back-off. Default DEFAULT_OUTLIER_EJECTION (3 failures, 1 s doubling to 60 s, at most 50 % of a
   * port's endpoints); `{ consecutiveFailures: 0 }` turns it off.
   */
  outlierEjection?: OutlierEjectionOptions;
  /** tslog-compatible; default silent. */
  logger?: Logger;
}

const EMPTY: readonly string[] = Object.freeze([]);

/**
 * Remembers, per ServicePortName object, its key string and state, so that a pick builds no string
 * and does one WeakMap lookup. The fields are compared on every use, so mutating the object is safe.
 */
interface KeyCacheEntry {
  namespace: string;
  name: string;
  port: string;
  key: string;
  state: BalancerState | undefined;
}

/**
 * Round-robin balancing over a shuffled endpoint list with optional ClientIP session affinity
 * [LoadBalancerRR]. The shuffle spreads the first clients of many proxies over different endpoints;
 * the list is reshuffled, and the rotation restarted, only when the set of endpoints really changes,
 * so informer resyncs do not disturb the rotation. A pick without affinity is O(1) and allocates
 * nothing.
 *
 * Differences from the reference, all fixing problems users hit (docs/differences.md): a later
 * `newService` updates the TTL; affinity records pointing at endpoints that left are dropped on every
 * endpoint change, Add included; an Add or Update is the whole truth for its Service, so ports it no
 * longer names are reset; endpoint lists outlive `deleteService`, so a Service re-created before its
 * endpoints change gets them back at once; affinity records are capped per Service port.
 */
export class RoundRobinLoadBalancer implements LoadBalancer {
  readonly #random: RandomSource;
  readonly #now: () => number;
  readonly #maxAffinity: number;
  readonly #outliers: OutlierSettings;
  readonly #log: Logger;
  /** Keyed by servicePortNameString. */
  readonly #states = new Map<string, BalancerState>();
  /** "ns/name" → the per-port lists its endpoint source last gave (unshuffled). */
  readonly #sources = new Map<string, Map<string, string[]>>();
  readonly #keys = new WeakMap<ServicePortName, KeyCacheEntry>();

  /** Warns once per burst of evictions, until cleanup brings the records below the limit again. */
  readonly #onLimit = (state: BalancerState): void => {
    if (state.warnedLimit) return;
    state.warnedLimit = true;
    this.#log.warn(
      `affinity records reached the limit of ${this.#maxAffinity}; evicting the oldest (raise maxAffinityRecords if this Service has that many clients)`,
    );
  };

  constructor(options: RoundRobinLoadBalancerOptions = {}) {
    const max = options.maxAffinityRecords ?? DEFAULT_MAX_AFFINITY_RECORDS;
    if (!(max === Number.POSITIVE_INFINITY || (Number.isInteger(max) && max >= 1))) {
      throw new InvalidOptionError('maxAffinityRecords', `must be a positive integer, got ${max}`);
    }
    this.#random = options.random ?? Math.random;
    this.#now = options.now ?? (() => performance.now());
    this.#maxAffinity = max;
    this.#outliers = outlierSettings(options.outlierEjection);
    this.#log = componentLogger(options.logger, 'load-balancer');
  }

  /**
   * The endpoint for a new connection or UDP session. Sticky hits refresh the record and leave the
   * rotation alone; `sessionAffinityReset` (after a failed dial) takes the next endpoint in the
   * rotation and overwrites the client's record. Errors are checked in the reference's order, so a
   * null `srcAddr` is fine for a Service without affinity or without endpoints.
   */
  nextEndpoint(
    svcPort: ServicePortName,
    srcAddr: Addr | null,
    sessionAffinityReset: boolean,
  ): string {
    const state = this.#lookup(svcPort);
    if (state === undefined) throw new MissingServiceEntryError(servicePortNameString(svcPort));
    if (state.endpoints.length === 0) {
      throw new MissingEndpointsError(servicePortNameString(svcPort));
    }
    if (!state.sticky) {
      return state.needsPick() ? state.pick(this.#now(), sessionAffinityReset) : state.next();
    }
    const now = this.#now();
    return state.nextSticky(srcAddr, now, sessionAffinityReset, this.#maxAffinity, this.#onLimit);
  }

  /**
   * Takes one dial attempt's outcome (the dialer reports each): a failure counts towards ejecting
   * the endpoint and makes the retry that follows take the next endpoint without using up another
   * client's slot; a success clears the endpoint's record. Unknown ports and endpoints are ignored.
   * Costs one cached lookup when nothing ever failed.
   */
  reportDialResult(svcPort: ServicePortName, endpoint: string, ok: boolean): void {
    const state = this.#lookup(svcPort);
    if (state === undefined) return;
    if (ok) {
      state.outliers?.report(endpoint, true, 0, 0);
      return;
    }
    state.failed = endpoint;
    if (this.#outliers.consecutiveFailures === 0) return;
    if (state.outliers === undefined) state.outliers = new OutlierTracker(this.#outliers);
    const now = this.#now();
    const wasEjected = state.outliers.isEjected(endpoint, now);
    state.outliers.report(endpoint, false, now, state.endpoints.length);
    if (!wasEjected && state.outliers.isEjected(endpoint, now)) {
      this.#log.info(
        `endpoint ${endpoint} of ${servicePortNameString(svcPort)} ejected after failed dials`,
      );
    }
  }

  /**
   * The port's endpoints out of the rotation now (outlier ejection), for status pages and tests;
   * empty when none or the port is unknown.
   */
  ejectedEndpoints(svcPort: ServicePortName): string[] {
    return this.#lookup(svcPort)?.outliers?.ejected(this.#now()) ?? [];
  }

  /**
   * Registers a Service port or updates it. An empty `affinityType` keeps the current one (endpoint
   * events register ports that way); the TTL is always updated, 0 meaning 10 800 s. A port that
   * endpoints already named starts with those endpoints.
   */
  newService(svcPort: ServicePortName, affinityType: AffinityType, ttlSeconds: number): void {
    const key = this.#key(svcPort);
    const ttl =
      ttlSeconds > 0 && Number.isFinite(ttlSeconds)
        ? ttlSeconds
        : DEFAULT_CLIENT_IP_AFFINITY_SECONDS;
    let state = this.#states.get(key);
    if (state === undefined) {
      state = new BalancerState(affinityType, ttl);
      const list = this.#sources
        .get(namespacedKey(svcPort.namespace, svcPort.name))
        ?.get(svcPort.port);
      if (list !== undefined) state.replaceEndpoints(list, this.#random);
      this.#states.set(key, state);
    } else {
      if (affinityType !== '' && affinityType !== state.affinityType) {
        state.setAffinityType(affinityType);
      }
      state.ttlSeconds = ttl;
    }
    state.registered = true;
    this.#log.debug(`service ${key}: affinity ${state.affinityType || 'None'}, ttl ${ttl}s`);
  }

  /** Forgets the port's rotation and affinity. Its endpoint lists are kept for a later newService. */
  deleteService(svcPort: ServicePortName): void {
    const key = this.#key(svcPort);
    const state = this.#states.get(key);
    if (state === undefined) return;
    state.live = false;
    this.#states.delete(key);
    this.#log.debug(`deleted service ${key}`);
  }

  /** Drops affinity records whose TTL has passed (whole seconds, as the reference). */
  cleanupStaleStickySessions(svcPort: ServicePortName): void {
    const state = this.#lookup(svcPort);
    if (state === undefined || state.affinity.size === 0) return;
    state.dropExpired(this.#now(), this.#maxAffinity);
  }

  /** True when the port is known and has at least one endpoint. */
  serviceHasEndpoints(svcPort: ServicePortName): boolean {
    return (this.#lookup(svcPort)?.endpoints.length ?? 0) > 0;
  }

  /** The port's current rotation (shuffled), for inspection and tests; empty when unknown. */
  endpoints(svcPort: ServicePortName): readonly string[] {
    return this.#lookup(svcPort)?.endpoints ?? EMPTY;
  }

  /**
   * How many ClientIP affinity records the port holds (expired ones count until
   * cleanupStaleStickySessions), for inspection and metrics; 0 when unknown.
   */
  stickySessionCount(svcPort: ServicePortName): number {
    return this.#lookup(svcPort)?.affinity.size ?? 0;
  }

  /** The object is the whole truth for its Service: named ports are replaced, others reset. */
  onEndpointsAdd(endpoints: Endpoints): void {
    this.#apply(undefined, endpoints);
  }

  /** As an add; `oldEndpoints` only matters when this balancer never saw the Service before. */
  onEndpointsUpdate(oldEndpoints: Endpoints, endpoints: Endpoints): void {
    this.#apply(oldEndpoints, endpoints);
  }

  /** Resets every port of the Service: endpoints and affinity go, type and TTL stay. */
  onEndpointsDelete(endpoints: Endpoints): void {
    const id = tryObjectName(endpoints);
    if (id === undefined) return;
    const ports = new Set(buildPortsToEndpointsMap(endpoints, this.#log).keys());
    for (const port of this.#sources.get(id.key)?.keys() ?? []) ports.add(port);
    this.#sources.delete(id.key);
    for (const port of ports) this.#resetPort(portKey(id, port));
  }

  /** Nothing to do: the balancer serves whatever it has as soon as it has it. */
  onEndpointsSynced(): void {}

  #apply(oldEndpoints: Endpoints | undefined, endpoints: Endpoints): void {
    const id = tryObjectName(endpoints);
    if (id === undefined) {
      this.#log.debug('ignoring Endpoints without metadata.name');
      return;
    }
    const oldId = oldEndpoints === undefined ? undefined : tryObjectName(oldEndpoints);
    if (oldId !== undefined && oldId.key !== id.key && oldEndpoints !== undefined) {
      this.onEndpointsDelete(oldEndpoints);
    }
    const next = buildPortsToEndpointsMap(endpoints, this.#log);
    let previous = this.#sources.get(id.key);
    if (previous === undefined && oldId?.key === id.key && oldEndpoints !== undefined) {
      previous = buildPortsToEndpointsMap(oldEndpoints, this.#log);
    }
    for (const [port, list] of next) this.#setEndpoints(portKey(id, port), list);
    for (const port of previous?.keys() ?? []) {
      if (!next.has(port)) this.#resetPort(portKey(id, port));
    }
    if (next.size > 0) this.#sources.set(id.key, next);
    else this.#sources.delete(id.key);
  }

  #setEndpoints(key: string, list: string[]): void {
    let state = this.#states.get(key);
    if (state === undefined) {
      // Endpoints before the Service: serve them at once, without affinity until newService.
      state = new BalancerState('', DEFAULT_CLIENT_IP_AFFINITY_SECONDS);
      this.#states.set(key, state);
    }
    // The same set changes nothing: order, rotation and affinity are kept.
    if (state.replaceEndpoints(list, this.#random)) {
      this.#log.debug(`setting endpoints for ${key} to ${list.join(', ')}`);
    }
  }

  #resetPort(key: string): void {
    const state = this.#states.get(key);
    if (state === undefined) return;
    if (!state.registered) {
      // Created by endpoints alone and now without any: nothing worth keeping.
      state.live = false;
      this.#states.delete(key);
    } else {
      state.clearEndpoints();
    }
    this.#log.debug(`removing endpoints for ${key}`);
  }

  #key(svcPort: ServicePortName): string {
    return this.#entry(svcPort).key;
  }

  /** The port's state, through the per-object cache: the hot path of every pick. */
  #lookup(svcPort: ServicePortName): BalancerState | undefined {
    const entry = this.#entry(svcPort);
    const cached = entry.state;
    if (cached?.live) return cached;
    entry.state = this.#states.get(entry.key);
    return entry.state;
  }

  #entry(svcPort: ServicePortName): KeyCacheEntry {
    const cached = this.#keys.get(svcPort);
    if (
      cached !== undefined &&
      cached.namespace === svcPort.namespace &&
      cached.name === svcPort.name &&
      cached.port === svcPort.port
    ) {
      return cached;
    }
    const { namespace, name, port } = svcPort;
    const entry = { namespace, name, port, key: servicePortNameString(svcPort), state: undefined };
    this.#keys.set(svcPort, entry);
    return entry;
  }
}

function portKey(id: { namespace: string; name: string }, port: string): string {
  return servicePortNameString({ namespace: id.namespace, name: id.name, port });
}
