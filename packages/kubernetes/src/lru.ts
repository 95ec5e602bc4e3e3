/**
 * A bounded map that forgets the least recently used entry, so the event correlator's caches cannot
 * grow with the number of objects a proxy ever talked about (client-go bounds them the same way).
 */
export class LruCache<V> {
  readonly #max: number;
  readonly #map = new Map<string, V>();

  constructor(max: number) {
    this.#max = Math.max(1, max);
  }

  /** The value for `key`, which becomes the most recently used. */
  get(key: string): V | undefined {
    const value = this.#map.get(key);
    if (value === undefined) return undefined;
    this.#map.delete(key);
    this.#map.set(key, value);
    return value;
  }

  /** Stores `value`, evicting the least recently used entry when full. */
  set(key: string, value: V): void {
    this.#map.delete(key);
    this.#map.set(key, value);
    if (this.#map.size > this.#max) {
      const oldest = this.#map.keys().next().value as string;
      this.#map.delete(oldest);
    }
  }

  get size(): number {
    return this.#map.size;
  }
}
