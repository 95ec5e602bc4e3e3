import type { EndpointsHandler } from '../config/handlers.js';
import type { Logger } from '../logger.js';
import type { Endpoints } from '../model/model.js';
import { tryObjectKey } from '../model/object-key.js';

/**
 * Chooses, per Service, which endpoint source reaches the load balancer: its EndpointSlices (merged)
 * when it has any, else its legacy Endpoints object. kube-proxy reads one source or the other; a
 * proxy fed both (a manifest naming both, or a move from Endpoints to slices) must not let one
 * source's delete wipe what the other gave, because the load balancer keeps one list per Service.
 *
 * The rule: slices win. An Endpoints object for a Service with slices is remembered but not
 * delivered; when the Service's last slice goes, the remembered Endpoints object takes over in the
 * same step (an update, so no client sees an empty Service in between). Costs O(1) per event and
 * one reference per Service with a legacy Endpoints object.
 */
export class EndpointSources {
  readonly #target: EndpointsHandler;
  readonly #log: Logger;
  /** "ns/service" → its last legacy Endpoints object (delivered or not). */
  readonly #legacy = new Map<string, Endpoints>();
  /** "ns/service" → the merged slice object last delivered for it. */
  readonly #sliced = new Map<string, Endpoints>();

  /** What the legacy Endpoints path calls. */
  readonly legacy: EndpointsHandler;
  /** What the EndpointSliceMerger delivers to. */
  readonly slices: EndpointsHandler;

  constructor(target: EndpointsHandler, log: Logger) {
    this.#target = target;
    this.#log = log;
    this.legacy = {
      onEndpointsAdd: (e) => this.#legacyState(undefined, e),
      onEndpointsUpdate: (old, e) => this.#legacyState(old, e),
      onEndpointsDelete: (e) => this.#legacyDelete(e),
      onEndpointsSynced: () => this.#target.onEndpointsSynced(),
    };
    this.slices = {
      onEndpointsAdd: (e) => this.#sliceState(undefined, e),
      onEndpointsUpdate: (old, e) => this.#sliceState(old, e),
      onEndpointsDelete: (e) => this.#sliceDelete(e),
      onEndpointsSynced: () => this.#target.onEndpointsSynced(),
    };
  }

  /** Whether the Service ("ns/name") is served from its slices, for inspection and tests. */
  servedFromSlices(serviceKey: string): boolean {
    return this.#sliced.has(serviceKey);
  }

  #legacyState(old: Endpoints | undefined, e: Endpoints): void {
    const key = tryObjectKey(e);
    if (key === undefined) return;
    const oldKey = old === undefined ? undefined : tryObjectKey(old);
    if (old !== undefined && oldKey !== undefined && oldKey !== key) this.#legacyDelete(old);
    const previous = this.#legacy.get(key);
    this.#legacy.set(key, e);
    if (this.#sliced.has(key)) {
      this.#log.debug(`Endpoints ${key} ignored: the Service has EndpointSlices, which win`);
      return;
    }
    if (previous !== undefined) this.#target.onEndpointsUpdate(previous, e);
    else if (old !== undefined && oldKey === key) this.#target.onEndpointsUpdate(old, e);
    else this.#target.onEndpointsAdd(e);
  }

  #legacyDelete(e: Endpoints): void {
    const key = tryObjectKey(e);
    if (key === undefined) return;
    const previous = this.#legacy.get(key);
    this.#legacy.delete(key);
    if (this.#sliced.has(key)) return;
    this.#target.onEndpointsDelete(previous ?? e);
  }

  #sliceState(old: Endpoints | undefined, e: Endpoints): void {
    const key = tryObjectKey(e);
    if (key === undefined) return;
    const previous = this.#sliced.get(key) ?? this.#legacy.get(key) ?? old;
    this.#sliced.set(key, e);
    if (previous !== undefined) this.#target.onEndpointsUpdate(previous, e);
    else this.#target.onEndpointsAdd(e);
  }

  #sliceDelete(e: Endpoints): void {
    const key = tryObjectKey(e);
    if (key === undefined) return;
    const previous = this.#sliced.get(key) ?? e;
    this.#sliced.delete(key);
    const fallback = this.#legacy.get(key);
    if (fallback !== undefined) this.#target.onEndpointsUpdate(previous, fallback);
    else this.#target.onEndpointsDelete(previous);
  }
}
