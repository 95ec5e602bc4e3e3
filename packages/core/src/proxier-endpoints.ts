import { channels } from './diagnostics.js';
import { EndpointSliceMerger } from './endpoint-slice-merger.js';
import type { InvalidObjectError } from './errors.js';
import type { EndpointSliceHandler, EndpointsHandler } from './handlers.js';
import type { LoadBalancer } from './load-balancer.js';
import type { Logger } from './logger.js';
import type { EndpointSlice, Endpoints } from './model.js';
import { splitObjectKey, tryObjectKey } from './object-key.js';
import { validateEndpointSlice, validateEndpoints } from './validation.js';

/** Logs a malformed object and publishes it on `userspace-proxy:object:rejected`. */
export function rejectObject(log: Logger, error: InvalidObjectError): void {
  log.warn(error.message);
  if (channels.objectRejected.hasSubscribers) {
    channels.objectRejected.publish({ kind: error.kind, key: error.key, reason: error.reason });
  }
}

/** Runs a handler body; whatever it throws is logged, never passed back to the informer. */
export function guarded(log: Logger, what: string, body: () => void): void {
  try {
    body();
  } catch (error) {
    log.error(`${what} failed`, error);
  }
}

/**
 * The Proxier's endpoint intake: validates Endpoints and EndpointSlices and hands them to the load
 * balancer at once (slices merged per Service by an EndpointSliceMerger). It never touches sockets,
 * costs O(1) in the number of Services, and never throws. `onSynced` is told when either kind has
 * synced, which is what the Proxier waits for besides Services.
 */
export class EndpointsIntake implements EndpointsHandler, EndpointSliceHandler {
  readonly #lb: LoadBalancer;
  readonly #log: Logger;
  readonly #slices: EndpointSliceMerger;
  readonly #onSynced: () => void;

  constructor(lb: LoadBalancer, log: Logger, onSynced: () => void) {
    this.#lb = lb;
    this.#log = log;
    this.#slices = new EndpointSliceMerger(lb, { logger: log });
    this.#onSynced = onSynced;
  }

  onEndpointsAdd(endpoints: Endpoints): void {
    guarded(this.#log, 'onEndpointsAdd', () => {
      const result = validateEndpoints(endpoints);
      if (result.ok) this.#lb.onEndpointsAdd(result.value);
      else rejectObject(this.#log, result.error);
    });
  }

  onEndpointsUpdate(oldEndpoints: Endpoints, endpoints: Endpoints): void {
    // A resync hands over the very same object: nothing can have changed.
    if (oldEndpoints === endpoints) return;
    guarded(this.#log, 'onEndpointsUpdate', () => {
      const result = validateEndpoints(endpoints);
      if (!result.ok) {
        rejectObject(this.#log, result.error);
        return;
      }
      const old = validateEndpoints(oldEndpoints);
      // An old state that was refused never reached the load balancer: this is its first state.
      if (old.ok) this.#lb.onEndpointsUpdate(old.value, result.value);
      else this.#lb.onEndpointsAdd(result.value);
    });
  }

  onEndpointsDelete(endpoints: Endpoints): void {
    guarded(this.#log, 'onEndpointsDelete', () => {
      const result = validateEndpoints(endpoints);
      if (result.ok) {
        this.#lb.onEndpointsDelete(result.value);
        return;
      }
      rejectObject(this.#log, result.error);
      // A malformed final state still names the Service whose endpoints must go.
      const named = byKey(tryObjectKey(endpoints));
      if (named !== undefined) this.#lb.onEndpointsDelete(named);
    });
  }

  onEndpointsSynced(): void {
    guarded(this.#log, 'onEndpointsSynced', () => this.#lb.onEndpointsSynced());
    this.#onSynced();
  }

  onEndpointSliceAdd(slice: EndpointSlice): void {
    guarded(this.#log, 'onEndpointSliceAdd', () => {
      const result = validateEndpointSlice(slice);
      if (result.ok) this.#slices.onEndpointSliceAdd(result.value);
      else rejectObject(this.#log, result.error);
    });
  }

  onEndpointSliceUpdate(oldSlice: EndpointSlice, slice: EndpointSlice): void {
    if (oldSlice === slice) return;
    guarded(this.#log, 'onEndpointSliceUpdate', () => {
      const result = validateEndpointSlice(slice);
      // The merger keeps its own copy of each slice and reads only the new one.
      if (result.ok) this.#slices.onEndpointSliceAdd(result.value);
      else rejectObject(this.#log, result.error);
    });
  }

  onEndpointSliceDelete(slice: EndpointSlice): void {
    guarded(this.#log, 'onEndpointSliceDelete', () => {
      const result = validateEndpointSlice(slice);
      if (result.ok) {
        this.#slices.onEndpointSliceDelete(result.value);
        return;
      }
      rejectObject(this.#log, result.error);
      // The merger forgets a slice by its name alone.
      const named = byKey(tryObjectKey(slice));
      if (named !== undefined)
        this.#slices.onEndpointSliceDelete(named as unknown as EndpointSlice);
    });
  }

  onEndpointSlicesSynced(): void {
    guarded(this.#log, 'onEndpointSlicesSynced', () => this.#slices.onEndpointSlicesSynced());
    this.#onSynced();
  }
}

/** A minimal object naming `key`, for deleting what a malformed final state still identifies. */
function byKey(key: string | undefined): Endpoints | undefined {
  const parts = key === undefined ? undefined : splitObjectKey(key);
  return parts === undefined ? undefined : { metadata: parts };
}
