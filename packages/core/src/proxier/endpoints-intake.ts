import type { EndpointSliceHandler, EndpointsHandler } from '../config/handlers.js';
import { EndpointSliceMerger } from '../load-balancing/endpoint-slice-merger.js';
import type { Logger } from '../logger.js';
import type { EndpointSlice, Endpoints } from '../model/model.js';
import { splitObjectKey, tryObjectKey } from '../model/object-key.js';
import {
  reportInvalidObject,
  type ValidationResult,
  validateEndpointSlice,
  validateEndpoints,
} from '../model/validation.js';
import { EndpointSources } from './endpoint-sources.js';

/** Runs a handler body; whatever it throws is logged, never passed back to the informer. */
export function guarded(log: Logger, what: string, body: () => void): void {
  try {
    body();
  } catch (error) {
    log.error(`${what} failed`, error);
  }
}

/** Validation that reuses what a config fan-out already checked (ValidateOptions.reuse). */
const REUSE = { reuse: true } as const;
const checkEndpoints = (obj: unknown) => validateEndpoints(obj, REUSE);
const checkSlice = (obj: unknown) => validateEndpointSlice(obj, REUSE);

/**
 * The Proxier's endpoint intake: validates Endpoints and EndpointSlices and hands them to the load
 * balancer at once (slices merged per Service by an EndpointSliceMerger). It never touches sockets,
 * costs O(1) in the number of Services, and never throws. `onSynced` is told when either kind has
 * synced, which is what the Proxier waits for besides Services. Objects a config fan-out delivered
 * were validated there and are not checked or copied again. A Service given both an Endpoints object
 * and slices is served from its slices ({@link EndpointSources}): neither source's events clobber
 * what the other gave.
 */
export class EndpointsIntake implements EndpointsHandler, EndpointSliceHandler {
  readonly #lb: EndpointsHandler;
  readonly #log: Logger;
  readonly #slices: EndpointSliceMerger;
  readonly #onSynced: () => void;

  /**
   * @param lb where endpoint lists go: the load balancer, or a handler that feeds it and then
   * tells who listens (the Proxier passes its EndpointsNotifier's wrapper).
   */
  constructor(lb: EndpointsHandler, log: Logger, onSynced: () => void) {
    const sources = new EndpointSources(lb, log);
    this.#lb = sources.legacy;
    this.#log = log;
    this.#slices = new EndpointSliceMerger(sources.slices, { logger: log });
    this.#onSynced = onSynced;
  }

  /** Hands a valid object to the load balancer. */
  onEndpointsAdd(endpoints: Endpoints): void {
    this.#accept('onEndpointsAdd', endpoints, checkEndpoints, (e) => this.#lb.onEndpointsAdd(e));
  }

  /** Hands a valid new state over; an old state that was refused makes it an add. */
  onEndpointsUpdate(oldEndpoints: Endpoints, endpoints: Endpoints): void {
    // A resync hands over the very same object: nothing can have changed.
    if (oldEndpoints === endpoints) return;
    this.#accept('onEndpointsUpdate', endpoints, checkEndpoints, (e) => {
      const old = checkEndpoints(oldEndpoints);
      // An old state that was refused never reached the load balancer: this is its first state.
      if (old.ok) this.#lb.onEndpointsUpdate(old.value, e);
      else this.#lb.onEndpointsAdd(e);
    });
  }

  /** Resets the Service's ports, even when the final state is malformed but still names it. */
  onEndpointsDelete(endpoints: Endpoints): void {
    this.#remove('onEndpointsDelete', endpoints, checkEndpoints, (e) =>
      this.#lb.onEndpointsDelete(e),
    );
  }

  /** Passed on to the load balancer, then counted as endpoints synced. */
  onEndpointsSynced(): void {
    guarded(this.#log, 'onEndpointsSynced', () => this.#lb.onEndpointsSynced());
    this.#onSynced();
  }

  /** Merges a valid slice into its Service's endpoints. */
  onEndpointSliceAdd(slice: EndpointSlice): void {
    this.#accept('onEndpointSliceAdd', slice, checkSlice, (s) =>
      this.#slices.onEndpointSliceAdd(s),
    );
  }

  /** As an add: the merger keeps its own copy of each slice and reads only the new one. */
  onEndpointSliceUpdate(oldSlice: EndpointSlice, slice: EndpointSlice): void {
    if (oldSlice === slice) return;
    this.onEndpointSliceAdd(slice);
  }

  /** Forgets the slice, by its name alone when the final state is malformed. */
  onEndpointSliceDelete(slice: EndpointSlice): void {
    this.#remove('onEndpointSliceDelete', slice, checkSlice, (s) =>
      this.#slices.onEndpointSliceDelete(s as EndpointSlice),
    );
  }

  /** Passed on to the merger (and so to the load balancer), then counted as endpoints synced. */
  onEndpointSlicesSynced(): void {
    guarded(this.#log, 'onEndpointSlicesSynced', () => this.#slices.onEndpointSlicesSynced());
    this.#onSynced();
  }

  #accept<T>(
    what: string,
    obj: unknown,
    check: (obj: unknown) => ValidationResult<T>,
    deliver: (value: T) => void,
  ): void {
    guarded(this.#log, what, () => {
      const result = check(obj);
      if (result.ok) deliver(result.value);
      else reportInvalidObject(this.#log, result.error);
    });
  }

  /** A delete: the validated object, or else a minimal one naming what the malformed state names. */
  #remove<T>(
    what: string,
    obj: unknown,
    check: (obj: unknown) => ValidationResult<T>,
    deliver: (value: T | Endpoints) => void,
  ): void {
    guarded(this.#log, what, () => {
      const result = check(obj);
      if (result.ok) {
        deliver(result.value);
        return;
      }
      reportInvalidObject(this.#log, result.error);
      // A malformed final state still names the Service (or slice) whose endpoints must go.
      const parts = splitObjectKey(tryObjectKey(obj) ?? '');
      if (parts !== undefined) deliver({ metadata: parts });
    });
  }
}
