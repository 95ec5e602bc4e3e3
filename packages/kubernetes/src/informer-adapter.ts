import {
  componentLogger,
  type InformerEventHandler,
  type Logger,
  type SharedInformer,
} from '@userspace-proxy/core';
import { LOG_MESSAGE_MAX_CHARS, logSafe } from '@userspace-proxy/core/diagnostics';
import { Backoff, type BackoffOptions } from './backoff.js';
import { acceptObject, type KeyedObject, objectKey } from './object-validation.js';
import { aborted, realTimers, type Timers } from './timers.js';

/**
 * The part of a `@kubernetes/client-node` informer (`makeInformer`, `ListWatch`) the adapter uses,
 * written structurally so an integrator's own informer, or a test fake, fits without the client.
 */
export interface ClientNodeInformer<T> {
  on(verb: 'add' | 'update' | 'delete', cb: (obj: T) => void): void;
  on(verb: 'error' | 'connect', cb: (err?: unknown) => void): void;
  off(verb: 'add' | 'update' | 'delete', cb: (obj: T) => void): void;
  off(verb: 'error' | 'connect', cb: (err?: unknown) => void): void;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** The cache, read once when the adapter attaches (an informer that already runs). */
  list?(namespace?: string): ReadonlyArray<T>;
  /** client-node sets it after delivering the initial list: the default sync signal. */
  latestResourceVersion?(): string;
}

/** Options of {@link ClientNodeInformerAdapter}; every one has a default. */
export interface InformerAdapterOptions<T> {
  /** The kind, for logs and rejected-object reports. Default "object". */
  kind?: string;
  /**
   * True (the default): `run()` starts the informer, restarts it with back-off after each error
   * (client-node stops for good after one) and stops it on abort. False: the integrator runs it and
   * `run()` only delivers resyncs until aborted.
   */
  manage?: boolean;
  /** Objects for which this returns false are treated as absent (dropped, or deleted when they stop matching). */
  filter?: (obj: T) => boolean;
  /**
   * Every known object is re-delivered as `onUpdate(obj, obj)` this often while `run()` runs,
   * repairing any handler state that drifted. 0 disables. Default 900 000 (kube-proxy's
   * configSyncPeriod, 15 min).
   */
  resyncPeriodMs?: number;
  /** Delays between restarts after errors. Default {@link DEFAULT_BACKOFF}. */
  backoff?: BackoffOptions;
  /**
   * Says whether the initial list has been delivered. Default: client-node's
   * `latestResourceVersion() !== ''`; for an informer without it, synced from the start.
   */
  hasSynced?: () => boolean;
  /** Default: real time. */
  timers?: Timers;
  /** Default: silent. */
  logger?: Logger;
}

/** kube-proxy's default configSyncPeriod. */
export const DEFAULT_RESYNC_PERIOD_MS = 15 * 60_000;

/**
 * Turns a client-node informer into core's {@link SharedInformer}: client-node reports only the new
 * object on update, so the adapter keeps the last object per key and hands handlers (old, new). It
 * isolates handlers from each other, drops malformed objects, restarts after errors with back-off and
 * resyncs periodically. The informer's own cache is left alone, so it can be shared with other code.
 */
export class ClientNodeInformerAdapter<T extends KeyedObject> implements SharedInformer<T> {
  readonly #informer: ClientNodeInformer<T>;
  readonly #kind: string;
  readonly #manage: boolean;
  readonly #filter: (obj: T) => boolean;
  readonly #resyncPeriodMs: number;
  readonly #backoff: Backoff;
  readonly #customSynced: (() => boolean) | undefined;
  readonly #timers: Timers;
  readonly #log: Logger;
  readonly #known = new Map<string, T>();
  readonly #handlers: InformerEventHandler<T>[] = [];
  #synced = false;
  #syncWaiters = new Set<() => void>();
  #syncPoll: unknown;
  #running: AbortSignal | undefined;
  #retryTimer: unknown;
  #resyncTimer: unknown;
  #connects = 0;

  constructor(informer: ClientNodeInformer<T>, opts: InformerAdapterOptions<T> = {}) {
    this.#informer = informer;
    this.#kind = opts.kind ?? 'object';
    this.#manage = opts.manage ?? true;
    this.#filter = opts.filter ?? (() => true);
    this.#resyncPeriodMs = opts.resyncPeriodMs ?? DEFAULT_RESYNC_PERIOD_MS;
    this.#timers = opts.timers ?? realTimers;
    this.#backoff = new Backoff(opts.backoff, () => this.#timers.now());
    this.#customSynced = opts.hasSynced;
    this.#log = componentLogger(opts.logger, `informer:${this.#kind}`);
    for (const obj of informer.list?.() ?? []) this.#onUpsert(obj);
    informer.on('add', (obj) => this.#onUpsert(obj));
    informer.on('update', (obj) => this.#onUpsert(obj));
    informer.on('delete', (obj) => this.#onDelete(obj));
    informer.on('error', (err) => this.#onError(err));
    informer.on('connect', () => this.#onConnect());
  }

  /** Adds a handler; it gets an `onAdd` for every object already known, then every change. */
  addEventHandler(handler: InformerEventHandler<T>): void {
    this.#handlers.push(handler);
    for (const obj of this.#known.values()) this.#call(handler, 'onAdd', obj);
  }

  /** True once the initial list has been delivered (sticky, as client-go's). */
  hasSynced(): boolean {
    if (this.#synced) return true;
    const custom = this.#customSynced;
    const rv = this.#informer.latestResourceVersion;
    if (custom ? custom() : rv ? rv.call(this.#informer) !== '' : true) this.markSynced();
    return this.#synced;
  }

  /**
   * Marks the initial list as delivered. The informers this package builds call it right after
   * client-node has handed out the listed objects, which is exact where polling the resource
   * version is not (a list may carry none).
   */
  markSynced(): void {
    if (this.#synced) return;
    this.#synced = true;
    this.#timers.clearTimeout(this.#syncPoll);
    const waiters = [...this.#syncWaiters];
    this.#syncWaiters.clear();
    for (const cb of waiters) {
      try {
        cb();
      } catch (err) {
        this.#log.error('a synced callback threw', err);
      }
    }
  }

  /**
   * Calls `callback` once synced (at once if already), so core's config fan-out need not poll.
   * Returns a function that cancels the call.
   */
  onSynced(callback: () => void): () => void {
    if (this.hasSynced()) {
      callback();
      return () => undefined;
    }
    this.#syncWaiters.add(callback);
    this.#pollSynced();
    return () => this.#syncWaiters.delete(callback);
  }

  /** Sync signals other than markSynced (a resource version, a custom check) are polled. */
  #pollSynced(): void {
    if (this.#syncPoll !== undefined) return;
    this.#syncPoll = this.#timers.setTimeout(() => {
      this.#syncPoll = undefined;
      if (!this.hasSynced() && this.#syncWaiters.size > 0) this.#pollSynced();
    }, 100);
  }

  /** Resolves true once synced, or false if `signal` aborts first. */
  waitForSync(signal?: AbortSignal): Promise<boolean> {
    return new Promise((resolve) => {
      if (this.hasSynced()) return resolve(true);
      if (signal?.aborted) return resolve(false);
      const onAbort = () => {
        cancel();
        resolve(false);
      };
      const cancel = this.onSynced(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve(true);
      });
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** How many objects are known (after the filter). */
  get size(): number {
    return this.#known.size;
  }

  /** The last known state of one object, by "namespace/name" (or "name"). */
  get(key: string): T | undefined {
    return this.#known.get(key);
  }

  /** Every known object, for inspection. */
  list(): T[] {
    return [...this.#known.values()];
  }

  /**
   * Runs until `signal` aborts. Only the first call starts the informer; a later call (the daemon
   * and a config fan-out may both call it) just waits for its own signal.
   */
  async run(signal: AbortSignal): Promise<void> {
    if (this.#running && !this.#running.aborted) return aborted(signal);
    this.#running = signal;
    this.#scheduleResync();
    if (this.#manage) this.#start();
    await aborted(signal);
    this.#timers.clearTimeout(this.#retryTimer);
    this.#timers.clearTimeout(this.#resyncTimer);
    this.#retryTimer = undefined;
    this.#resyncTimer = undefined;
    if (this.#manage) {
      await this.#informer.stop().catch((err: unknown) => this.#log.debug('stop failed', err));
    }
  }

  #isStopping(): boolean {
    return this.#running === undefined || this.#running.aborted;
  }

  #start(): void {
    this.#informer.start().catch((err: unknown) => this.#onError(err));
  }

  #onConnect(): void {
    this.#connects++;
    this.#log.debug(`watch (re)connecting, #${this.#connects}`);
  }

  #onError(err: unknown): void {
    if (this.#isStopping()) return;
    if ((err as { name?: unknown })?.name === 'AbortError') {
      // Someone stopped the informer (its owner, for one that is not managed here).
      this.#log.debug('watch aborted');
      if (!this.#manage) return;
    }
    const status = (err as { statusCode?: unknown })?.statusCode;
    // The message may carry an API Status message: whatever the server (or a proxy) sent.
    const text = logSafe(err instanceof Error ? err.message : String(err), LOG_MESSAGE_MAX_CHARS);
    if (!this.#manage) {
      this.#log.warn(`informer error (its owner restarts it): ${text}`);
      return;
    }
    if (this.#retryTimer !== undefined) return;
    const delay = this.#backoff.next();
    this.#log.warn(
      `list/watch failed${status ? ` (HTTP ${status})` : ''}: ${text}; keeping the last known state, retrying in ${delay} ms`,
    );
    this.#retryTimer = this.#timers.setTimeout(() => {
      this.#retryTimer = undefined;
      if (!this.#isStopping()) this.#start();
    }, delay);
  }

  #scheduleResync(): void {
    if (this.#resyncPeriodMs <= 0) return;
    this.#resyncTimer = this.#timers.setTimeout(() => {
      if (this.#isStopping()) return;
      for (const obj of [...this.#known.values()]) this.#dispatch('onUpdate', obj, obj);
      this.#scheduleResync();
    }, this.#resyncPeriodMs);
  }

  #onUpsert(obj: T): void {
    if (!acceptObject(this.#log, this.#kind, obj)) return;
    const key = objectKey(obj);
    const old = this.#known.get(key);
    let pass: boolean;
    try {
      pass = this.#filter(obj);
    } catch (err) {
      this.#log.warn(`filter threw for ${this.#kind} ${key}; dropping it`, err);
      pass = false;
    }
    if (pass) {
      this.#known.set(key, obj);
      if (old) this.#dispatch('onUpdate', old, obj);
      else this.#dispatch('onAdd', obj);
    } else if (old) {
      this.#known.delete(key);
      this.#dispatch('onDelete', old);
    }
  }

  #onDelete(obj: T): void {
    if (!acceptObject(this.#log, this.#kind, obj)) return;
    const key = objectKey(obj);
    if (!this.#known.delete(key)) return;
    this.#dispatch('onDelete', obj);
  }

  #dispatch(method: 'onAdd' | 'onDelete', obj: T): void;
  #dispatch(method: 'onUpdate', old: T, obj: T): void;
  #dispatch(method: keyof InformerEventHandler<T>, a: T, b?: T): void {
    for (const handler of this.#handlers) this.#call(handler, method, a, b);
  }

  #call(handler: InformerEventHandler<T>, method: keyof InformerEventHandler<T>, a: T, b?: T) {
    try {
      if (method === 'onUpdate') handler.onUpdate(a, b as T);
      else handler[method](a);
    } catch (err) {
      this.#log.error(`a ${this.#kind} handler threw in ${method}; other handlers carry on`, err);
    }
  }
}

/** Wraps a client-node informer (one the integrator already runs, or one built here) for core. */
export function fromClientNodeInformer<T extends KeyedObject>(
  informer: ClientNodeInformer<T>,
  opts?: InformerAdapterOptions<T>,
): ClientNodeInformerAdapter<T> {
  return new ClientNodeInformerAdapter(informer, opts);
}
