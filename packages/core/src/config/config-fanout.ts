import type { CacheMutationError } from '../errors.js';
import { componentLogger, type Logger } from '../logger.js';
import { logSafe } from '../model/log-safe.js';
import { objectKey, tryObjectKey } from '../model/object-key.js';
import {
  reportInvalidObject,
  type ValidateOptions,
  type ValidationResult,
} from '../model/validation.js';
import {
  CacheMutationDetector,
  type IntervalTimers,
  mutationDetectionFromEnv,
} from './cache-mutation-detector.js';
import type { DeletedFinalStateUnknown, SharedInformer } from './informer.js';

/**
 * The engine shared by ServiceConfig, EndpointsConfig and EndpointSliceConfig: it turns one
 * informer's events into handler calls. Every object is validated first (validation.ts), so a
 * malformed object from any source is logged, published on the `objectRejected` channel and dropped
 * instead of reaching the Proxier. The fan-out also remembers the last object it delivered for each
 * key, so handlers always see a coherent add → update* → delete sequence per object even when some
 * states in between were invalid and dropped.
 *
 * An object that already is a validator's copy (what this package's Kubernetes informers cache: they
 * validate as they parse) is delivered as it is, not copied again (`ValidateOptions.reuse`): with
 * 100 000 endpoints a second copy of every Service and EndpointSlice is some 40 MB.
 */

/** Validation that gives back an object a validator of the same kind already returned. */
const REUSE: ValidateOptions = { reuse: true };

/** Default interval between two `hasSynced()` checks of an informer that cannot notify (client-go's). */
export const DEFAULT_SYNC_POLL_INTERVAL_MS = 100;

/**
 * An optional informer capability: telling when it becomes synced, so `run()` need not poll.
 * StaticInformer has it; an integrator's informer may add it.
 */
export interface SyncedNotifier {
  /** Calls `callback` once synced (possibly at once); returns a function that cancels it. */
  onSynced(callback: () => void): () => void;
}

/** The timer functions the sync poll uses; inject fakes in tests. */
export interface TimeoutTimers {
  /** As the global setTimeout; returns a handle for clearTimeout. */
  setTimeout(callback: () => void, ms: number): unknown;
  /** As the global clearTimeout. */
  clearTimeout(handle: unknown): void;
}

const defaultTimeouts: TimeoutTimers = {
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** Options of every config fan-out; every one has a default. */
export interface ConfigOptions {
  /** tslog-compatible; default silent. */
  logger?: Logger;
  /** Names the controller in logs. Default "service config", "endpoints config", "endpoint slice config". */
  name?: string;
  /**
   * Start the informer's own `run()` from `run()`. Default true. Pass false when the informer is
   * shared and already run elsewhere, so it is not started twice.
   */
  runInformer?: boolean;
  /** Interval between `hasSynced()` checks when the informer cannot notify. Default 100. */
  syncPollIntervalMs?: number;
  /** Default: the global setTimeout / clearTimeout. */
  timers?: TimeoutTimers;
  /**
   * Report handlers that mutate delivered objects (a deep copy per object). Default: on when the
   * environment sets KUBE_CACHE_MUTATION_DETECTOR=true, as in client-go.
   */
  detectMutations?: boolean;
  /** Called with every mutation found; it is also logged as an error. */
  onMutation?: (error: CacheMutationError) => void;
  /** Interval of the periodic mutation check while `run()` runs. Default 10 000. */
  mutationCheckIntervalMs?: number;
  /** Default: the global setInterval / clearInterval. */
  mutationTimers?: IntervalTimers;
  /** Where KUBE_CACHE_MUTATION_DETECTOR is read. Default `process.env`. */
  env?: Record<string, string | undefined>;
}

/** How a fan-out validates its kind and calls its handler interface. */
export interface FanoutKind<T, H> {
  /** "Service", "Endpoints", "EndpointSlice". */
  kind: string;
  /** The default controller name in logs. */
  name: string;
  /**
   * Checks and copies one object from the informer; with `{ reuse: true }` (what the fan-out
   * passes) an object this validator already returned comes back as it is.
   */
  validate(obj: unknown, options?: ValidateOptions): ValidationResult<T>;
  /** Calls the handler's add method. */
  add(handler: H, obj: T): void;
  /** Calls the handler's update method. */
  update(handler: H, oldObj: T, obj: T): void;
  /** Calls the handler's delete method. */
  delete(handler: H, obj: T): void;
  /** Calls the handler's synced method. */
  synced(handler: H): void;
}

function unwrapTombstone(obj: unknown): { obj: unknown; key: string | undefined } {
  try {
    if (typeof obj === 'object' && obj !== null && !('metadata' in obj) && 'obj' in obj) {
      const tombstone = obj as DeletedFinalStateUnknown<unknown>;
      return {
        obj: tombstone.obj,
        key: typeof tombstone.key === 'string' ? tombstone.key : undefined,
      };
    }
  } catch {
    // An unreadable object is passed on as is; validation rejects it.
  }
  return { obj, key: undefined };
}

/**
 * Fans one informer's events out to handlers, synchronously and in registration order. Register
 * every handler before events flow (before the informer runs or receives objects): a handler
 * registered later receives nothing already delivered. A handler that throws is logged and does not
 * stop the other handlers or the informer.
 */
export class ConfigFanout<T, H> {
  readonly #informer: SharedInformer<T>;
  readonly #kind: FanoutKind<T, H>;
  readonly #name: string;
  readonly #log: Logger;
  readonly #runInformer: boolean;
  readonly #pollMs: number;
  readonly #timers: TimeoutTimers;
  readonly #detector: CacheMutationDetector | undefined;
  #handlers: readonly H[] = [];
  /** The last object delivered per key: the state every handler knows. */
  readonly #delivered = new Map<string, T>();
  #informerStarted = false;
  #syncedDelivered = false;

  constructor(informer: SharedInformer<T>, kind: FanoutKind<T, H>, options: ConfigOptions = {}) {
    this.#informer = informer;
    this.#kind = kind;
    this.#name = options.name ?? kind.name;
    this.#log = componentLogger(options.logger, this.#name);
    this.#runInformer = options.runInformer ?? true;
    this.#pollMs = options.syncPollIntervalMs ?? DEFAULT_SYNC_POLL_INTERVAL_MS;
    this.#timers = options.timers ?? defaultTimeouts;
    if (options.detectMutations ?? mutationDetectionFromEnv(options.env)) {
      this.#detector = new CacheMutationDetector({
        kind: kind.kind,
        ...(options.onMutation && { onMutation: options.onMutation }),
        ...(options.mutationCheckIntervalMs !== undefined && {
          checkIntervalMs: options.mutationCheckIntervalMs,
        }),
        ...(options.mutationTimers && { timers: options.mutationTimers }),
        ...(options.logger && { logger: options.logger }),
      });
    }
    informer.addEventHandler({
      onAdd: (obj) => this.#onAdd(obj),
      onUpdate: (_old, obj) => this.#onAdd(obj),
      onDelete: (obj) => this.#onDelete(obj),
    });
  }

  /** Appends a handler. Call it before events flow; see the class documentation. */
  registerEventHandler(handler: H): void {
    this.#handlers = [...this.#handlers, handler];
  }

  /** How many objects the handlers currently know (delivered and not deleted). */
  get size(): number {
    return this.#delivered.size;
  }

  /**
   * Starts the informer (if it has `run()` and `runInformer` is not false), waits until it has
   * synced, calls the synced method of every handler once, in order, then resolves when `signal`
   * aborts. If `signal` aborts before the informer syncs, no synced call is made.
   */
  async run(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return;
    this.#log.info(`Starting ${this.#name} controller`);
    this.#startInformer(signal);
    this.#detector?.start(signal);
    if (await this.#waitForSync(signal)) {
      if (!this.#syncedDelivered) {
        this.#syncedDelivered = true;
        for (const handler of this.#handlers)
          this.#call('synced', undefined, () => this.#kind.synced(handler));
      }
    }
    if (!signal.aborted) {
      await new Promise<void>((resolve) =>
        signal.addEventListener('abort', () => resolve(), { once: true }),
      );
    }
    this.#detector?.stop();
  }

  #startInformer(signal: AbortSignal): void {
    const run = this.#informer.run;
    if (!this.#runInformer || this.#informerStarted || typeof run !== 'function') return;
    this.#informerStarted = true;
    try {
      Promise.resolve(run.call(this.#informer, signal)).catch((err: unknown) => {
        this.#log.error(`the ${this.#kind.kind} informer failed`, err);
      });
    } catch (err) {
      this.#log.error(`the ${this.#kind.kind} informer failed to start`, err);
    }
  }

  #hasSynced(): boolean {
    try {
      return this.#informer.hasSynced() === true;
    } catch (err) {
      this.#log.error('hasSynced() threw; treating the informer as not synced', err);
      return false;
    }
  }

  /** Resolves true once the informer is synced, false if `signal` aborts first. */
  #waitForSync(signal: AbortSignal): Promise<boolean> {
    if (this.#hasSynced()) return Promise.resolve(true);
    this.#log.info(`Waiting for caches to sync for ${this.#name}`);
    return new Promise<boolean>((resolve) => {
      let timer: unknown;
      let cancelNotify: (() => void) | undefined;
      let done = false;
      const finish = (synced: boolean) => {
        if (done) return;
        done = true;
        signal.removeEventListener('abort', onAbort);
        if (timer !== undefined) this.#timers.clearTimeout(timer);
        cancelNotify?.();
        if (synced) this.#log.info(`Caches are synced for ${this.#name}`);
        resolve(synced);
      };
      const onAbort = () => finish(false);
      signal.addEventListener('abort', onAbort, { once: true });
      const notifier = this.#informer as Partial<SyncedNotifier>;
      if (typeof notifier.onSynced === 'function') {
        try {
          // Re-check on notification: the informer's word is hasSynced(), the callback is a hint.
          const cancel = notifier.onSynced(() => this.#hasSynced() && finish(true));
          if (done) cancel();
          else cancelNotify = cancel;
          return;
        } catch (err) {
          this.#log.warn('onSynced() threw; polling hasSynced() instead', err);
        }
      }
      const poll = () => {
        timer = undefined;
        if (this.#hasSynced()) finish(true);
        else if (!done) timer = this.#timers.setTimeout(poll, this.#pollMs);
      };
      timer = this.#timers.setTimeout(poll, this.#pollMs);
    });
  }

  /** Add and update are one path: what matters is whether handlers already know the key. */
  #onAdd(raw: unknown): void {
    const result = this.#kind.validate(raw, REUSE);
    if (!result.ok) {
      reportInvalidObject(this.#log, result.error);
      return;
    }
    const obj = result.value;
    const key = objectKey(obj);
    const previous = this.#delivered.get(key);
    this.#delivered.set(key, obj);
    this.#detector?.watch(key, obj);
    if (previous === undefined) {
      this.#fanOut('add', key, (h) => this.#kind.add(h, obj));
    } else {
      this.#fanOut('update', key, (h) => this.#kind.update(h, previous, obj));
      // A reused object may be the very one delivered before (a resync): it stays watched.
      if (previous !== obj) this.#detector?.release(previous);
    }
    this.#detector?.verify(obj);
  }

  #onDelete(raw: unknown): void {
    const { obj, key: tombstoneKey } = unwrapTombstone(raw);
    const result = this.#kind.validate(obj, REUSE);
    const key = result.ok ? objectKey(result.value) : (tryObjectKey(obj) ?? tombstoneKey);
    const previous = key === undefined ? undefined : this.#delivered.get(key);
    if (key === undefined || previous === undefined) {
      if (!result.ok) reportInvalidObject(this.#log, result.error);
      else
        this.#log.debug(
          `ignoring the delete of ${this.#kind.kind} ${logSafe(String(key))}, which was never delivered`,
        );
      return;
    }
    // Handlers get the state they last saw, even if the final state was invalid or differs.
    this.#delivered.delete(key);
    this.#fanOut('delete', key, (h) => this.#kind.delete(h, previous));
    this.#detector?.release(previous);
  }

  #fanOut(event: string, key: string, call: (handler: H) => void): void {
    for (const handler of this.#handlers) this.#call(event, key, () => call(handler));
  }

  #call(event: string, key: string | undefined, call: () => void): void {
    try {
      call();
    } catch (err) {
      const what = key === undefined ? event : `${event} of ${this.#kind.kind} ${key}`;
      this.#log.error(
        `a ${this.#kind.kind} handler threw on ${what}; the other handlers carry on`,
        err,
      );
    }
  }
}
