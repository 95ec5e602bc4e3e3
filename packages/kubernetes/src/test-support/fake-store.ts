import { randomUUID } from 'node:crypto';

/** An object as the fake API server stores it. */
export interface StoredObject {
  metadata: {
    name: string;
    namespace?: string;
    resourceVersion?: string;
    uid?: string;
    creationTimestamp?: string;
    labels?: Record<string, string>;
    [k: string]: unknown;
  };
  [k: string]: unknown;
}

/** One change, as a watch replays it. `old` is the previous state (for selector transitions). */
export interface WatchEvent {
  resource: string;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  obj: StoredObject;
  old?: StoredObject;
  rv: number;
}

function keyOf(namespace: string | undefined, name: string): string {
  return namespace ? `${namespace}/${name}` : name;
}

/**
 * The fake API server's etcd: objects per resource, one global resource version, and a change
 * history that watches replay from. `compact()` forgets the history, as etcd compaction does, so a
 * watch from an older version gets 410 Gone.
 */
export class FakeStore {
  rv = 1000;
  compactedRv = 0;
  onEvent: ((ev: WatchEvent) => void) | undefined;
  readonly #objects = new Map<string, Map<string, StoredObject>>();
  #history: WatchEvent[] = [];

  #bucket(resource: string): Map<string, StoredObject> {
    let b = this.#objects.get(resource);
    if (!b) {
      b = new Map();
      this.#objects.set(resource, b);
    }
    return b;
  }

  #record(ev: WatchEvent): void {
    this.#history.push(ev);
    this.onEvent?.(ev);
  }

  /** Adds an object; it gets a uid, a creation time and the next resource version. */
  create(resource: string, input: StoredObject): StoredObject {
    const obj = structuredClone(input);
    obj.metadata.resourceVersion = String(++this.rv);
    obj.metadata.uid ??= randomUUID();
    obj.metadata.creationTimestamp ??= new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    this.#bucket(resource).set(keyOf(obj.metadata.namespace, obj.metadata.name), obj);
    this.#record({ resource, type: 'ADDED', obj, rv: this.rv });
    return obj;
  }

  /** Replaces an existing object (creates it when absent); it gets the next resource version. */
  update(resource: string, input: StoredObject): StoredObject {
    const key = keyOf(input.metadata.namespace, input.metadata.name);
    const old = this.#bucket(resource).get(key);
    if (!old) return this.create(resource, input);
    const obj = structuredClone(input);
    obj.metadata.uid = old.metadata.uid as string;
    obj.metadata.creationTimestamp = old.metadata.creationTimestamp as string;
    obj.metadata.resourceVersion = String(++this.rv);
    this.#bucket(resource).set(key, obj);
    this.#record({ resource, type: 'MODIFIED', obj, old, rv: this.rv });
    return obj;
  }

  /** Removes an object; returns its final state (at the deletion's version), or undefined. */
  delete(resource: string, namespace: string | undefined, name: string): StoredObject | undefined {
    const key = keyOf(namespace, name);
    const old = this.#bucket(resource).get(key);
    if (!old) return undefined;
    this.#bucket(resource).delete(key);
    const obj = structuredClone(old);
    obj.metadata.resourceVersion = String(++this.rv);
    this.#record({ resource, type: 'DELETED', obj, old, rv: this.rv });
    return obj;
  }

  get(resource: string, namespace: string | undefined, name: string): StoredObject | undefined {
    return this.#bucket(resource).get(keyOf(namespace, name));
  }

  /** Every object of a resource, in key order, as etcd returns them. */
  list(resource: string): StoredObject[] {
    return [...this.#bucket(resource).entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([, obj]) => obj);
  }

  /** The changes to `resource` after version `from`. */
  historySince(resource: string, from: number): WatchEvent[] {
    return this.#history.filter((ev) => ev.resource === resource && ev.rv > from);
  }

  /** Forgets the history: a watch from any version before now gets 410 Gone. */
  compact(): void {
    this.compactedRv = this.rv;
    this.#history = [];
  }

  /** Loads many objects at once without history (a cluster that existed before the test). */
  seed(resource: string, objs: StoredObject[]): void {
    const b = this.#bucket(resource);
    for (const input of objs) {
      const obj = structuredClone(input);
      obj.metadata.resourceVersion = String(++this.rv);
      obj.metadata.uid ??= randomUUID();
      b.set(keyOf(obj.metadata.namespace, obj.metadata.name), obj);
    }
    this.compact();
  }
}
