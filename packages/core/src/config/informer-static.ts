import { InvalidObjectError } from '../errors.js';
import { componentLogger, type Logger } from '../logger.js';
import { logSafe } from '../model/log-safe.js';
import { tryObjectKey, UNKNOWN_KEY } from '../model/object-key.js';
import { reportInvalidObject } from '../model/validation.js';
import { findDifference } from './cache-mutation-detector.js';
import type { InformerEventHandler, SharedInformer } from './informer.js';

/**
 * An in-memory {@link SharedInformer}: the store behind the manifest-file source, tests, and any
 * integrator who computes objects rather than watching an API. It keys objects by "namespace/name"
 * and stores them as given (it never validates them: that is the config fan-out's job, so the same
 * rules apply to every source).
 *
 * Delivery is synchronous but never re-entrant: a handler that changes the informer from inside a
 * callback has its change queued and delivered after the current event has reached every handler,
 * so every handler sees the events of one object in the same order.
 */

/** Options of {@link StaticInformer}. */
export interface StaticInformerOptions {
  /** Whether the informer starts synced. Default true; pass false and call `markSynced()` (or
   * `replace()`) once the initial objects are in, so consumers wait for the full list. */
  synced?: boolean;
  /** The kind named in logs and rejection reports ("Service"). Default "object". */
  kind?: string;
  /** tslog-compatible; default silent. */
  logger?: Logger;
}

type Notification<T> =
  | { type: 'add'; obj: T }
  | { type: 'update'; old: T; obj: T }
  | { type: 'delete'; obj: T };

interface Pending<T> {
  notification: Notification<T>;
  /** The handlers registered when the change happened: later handlers already saw its result. */
  handlers: readonly InformerEventHandler<T>[];
}

/** An in-memory informer keyed by "namespace/name". Every mutating method returns whether it did anything. */
export class StaticInformer<T> implements SharedInformer<T> {
  readonly #store = new Map<string, T>();
  #handlers: readonly InformerEventHandler<T>[] = [];
  readonly #queue: Pending<T>[] = [];
  #dispatching = false;
  #synced: boolean;
  #syncedCallbacks = new Set<() => void>();
  readonly #kind: string;
  readonly #log: Logger;

  constructor(options: StaticInformerOptions = {}) {
    this.#synced = options.synced ?? true;
    this.#kind = options.kind ?? 'object';
    this.#log = componentLogger(options.logger, 'static-informer');
  }

  /** Registers a handler; it first receives an `onAdd` for every object already stored. */
  addEventHandler(handler: InformerEventHandler<T>): void {
    this.#handlers = [...this.#handlers, handler];
    for (const obj of this.#store.values()) {
      this.#queue.push({ notification: { type: 'add', obj }, handlers: [handler] });
    }
    this.#drain();
  }

  hasSynced(): boolean {
    return this.#synced;
  }

  /**
   * Calls `callback` once the informer is synced (at once, synchronously, if it already is). Returns
   * a function that cancels the callback. The config fan-out uses this instead of polling.
   */
  onSynced(callback: () => void): () => void {
    if (this.#synced) {
      callback();
      return () => {};
    }
    const once = () => callback();
    this.#syncedCallbacks.add(once);
    return () => this.#syncedCallbacks.delete(once);
  }

  /** Marks the initial list as delivered. Idempotent. */
  markSynced(): void {
    if (this.#synced) return;
    this.#synced = true;
    const callbacks = [...this.#syncedCallbacks];
    this.#syncedCallbacks.clear();
    for (const callback of callbacks) {
      try {
        callback();
      } catch (err) {
        this.#log.error('a synced callback threw', err);
      }
    }
  }

  /** Adds an object; an object whose key is already stored is delivered as an update. */
  add(obj: T): boolean {
    const key = this.#keyOf(obj, 'add');
    if (key === undefined) return false;
    const old = this.#store.get(key);
    this.#store.set(key, obj);
    this.#enqueue(old === undefined ? { type: 'add', obj } : { type: 'update', old, obj });
    this.#drain();
    return true;
  }

  /** Replaces an object, delivering (old, new); an unknown key becomes an add. */
  update(obj: T): boolean {
    return this.add(obj);
  }

  /**
   * Deletes the object with `objOrKey`'s key ("ns/name" or an object). Handlers receive the stored
   * object, the state they last saw. Returns false when nothing was stored under the key.
   */
  delete(objOrKey: T | string): boolean {
    const key = typeof objOrKey === 'string' ? objOrKey : this.#keyOf(objOrKey, 'delete');
    if (key === undefined) return false;
    const old = this.#store.get(key);
    if (old === undefined) return false;
    this.#store.delete(key);
    this.#enqueue({ type: 'delete', obj: old });
    this.#drain();
    return true;
  }

  /**
   * Makes the store hold exactly `objs`: deletes what is gone, then adds what is new and updates
   * what changed (deep comparison; unchanged objects cause no event), in the order given. A later
   * duplicate key wins. Marks the informer synced, since a full list is a synced state. This is what a
   * manifest file's reload does. Returns the number of events delivered.
   */
  replace(objs: readonly T[]): number {
    const next = new Map<string, T>();
    for (const obj of objs) {
      const key = this.#keyOf(obj, 'replace');
      if (key === undefined) continue;
      if (next.has(key))
        this.#log.warn(`${this.#kind} ${logSafe(key)} is listed twice; the last one is used`);
      next.delete(key);
      next.set(key, obj);
    }
    let events = 0;
    for (const [key, old] of [...this.#store]) {
      if (next.has(key)) continue;
      this.#store.delete(key);
      this.#enqueue({ type: 'delete', obj: old });
      events++;
    }
    for (const [key, obj] of next) {
      const old = this.#store.get(key);
      if (old !== undefined && findDifference(old, obj) === undefined) continue;
      this.#store.set(key, obj);
      this.#enqueue(old === undefined ? { type: 'add', obj } : { type: 'update', old, obj });
      events++;
    }
    this.#drain();
    this.markSynced();
    return events;
  }

  /** A snapshot of the stored objects, in insertion order. */
  list(): T[] {
    return [...this.#store.values()];
  }

  /** The stored object with key "ns/name", if any. */
  get(key: string): T | undefined {
    return this.#store.get(key);
  }

  /** The stored keys, in insertion order. */
  keys(): string[] {
    return [...this.#store.keys()];
  }

  #keyOf(obj: unknown, operation: string): string | undefined {
    const key = tryObjectKey(obj);
    if (key === undefined) {
      const reason = `cannot ${operation}: metadata.name must be a non-empty string`;
      reportInvalidObject(this.#log, new InvalidObjectError(this.#kind, UNKNOWN_KEY, reason));
    }
    return key;
  }

  #enqueue(notification: Notification<T>): void {
    if (this.#handlers.length > 0) this.#queue.push({ notification, handlers: this.#handlers });
  }

  /** Delivers queued notifications in order; a nested call returns at once and the outer loop goes on. */
  #drain(): void {
    if (this.#dispatching) return;
    this.#dispatching = true;
    try {
      for (let next = this.#queue.shift(); next !== undefined; next = this.#queue.shift()) {
        for (const handler of next.handlers) this.#deliver(handler, next.notification);
      }
    } finally {
      this.#dispatching = false;
    }
  }

  #deliver(handler: InformerEventHandler<T>, n: Notification<T>): void {
    try {
      if (n.type === 'add') handler.onAdd(n.obj);
      else if (n.type === 'update') handler.onUpdate(n.old, n.obj);
      else handler.onDelete(n.obj);
    } catch (err) {
      this.#log.error(
        `an event handler threw on ${n.type} of ${this.#kind} ${logSafe(String(tryObjectKey(n.obj)))}`,
        err,
      );
    }
  }
}
