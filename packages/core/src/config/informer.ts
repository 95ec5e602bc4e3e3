/**
 * The one contract every source of objects implements: a manifest file, an in-memory store, a
 * `@kubernetes/client-node` informer behind an adapter, or an integrator's own informer. Sharing one
 * informer between the proxy and other code means nothing is listed or watched twice.
 */

/** What a delete may deliver when the informer missed the final state (client-go's DeletedFinalStateUnknown). */
export interface DeletedFinalStateUnknown<T> {
  /** The "ns/name" key of the deleted object. */
  key: string;
  /** The last state the informer knew, possibly stale. */
  obj: T;
}

/** The callbacks an informer calls. They are called synchronously, in the informer's order. */
export interface InformerEventHandler<T> {
  /** An object appeared, or was listed (also for a handler registered late). */
  onAdd(obj: T): void;
  /** Called with old === obj (deep-equal) on a periodic resync; handlers must treat that as no change. */
  onUpdate(oldObj: T, obj: T): void;
  /** `obj` may be a tombstone; the config fan-out unwraps it. */
  onDelete(obj: T | DeletedFinalStateUnknown<T>): void;
}

/** A source of objects of one kind. */
export interface SharedInformer<T> {
  /**
   * Registers a handler. Handlers registered before the initial list receive one `onAdd` per object;
   * a handler registered later receives an `onAdd` for every object already known, as client-go does.
   */
  addEventHandler(handler: InformerEventHandler<T>): void;
  /** True once the initial list has been delivered to every registered handler. */
  hasSynced(): boolean;
  /** Starts the informer, if it needs starting; resolves when `signal` aborts. */
  run?(signal: AbortSignal): Promise<void>;
}
