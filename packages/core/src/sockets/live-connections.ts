/** What a connection needs to be in a {@link LiveConnections} list. */
export interface LiveLink<T> {
  liveNext: T | undefined;
  livePrev: T | undefined;
  /** Resets the connection now (a drain's deadline passed). */
  abort(): void;
}

/**
 * The connections a socket carries, as an intrusive doubly-linked list through each connection's
 * `liveNext` / `livePrev`: O(1) to add and remove, and no memory per connection beyond the two
 * fields, which matters at hundreds of thousands of idle connections (a Set costs an entry each).
 * Only `abortAll` walks it.
 */
export class LiveConnections<T extends LiveLink<T>> {
  #head: T | undefined;

  /** Links `conn` in. */
  add(conn: T): void {
    conn.livePrev = undefined;
    conn.liveNext = this.#head;
    if (this.#head !== undefined) this.#head.livePrev = conn;
    this.#head = conn;
  }

  /** Links `conn` out; nothing when it is not in the list. */
  delete(conn: T): void {
    const { livePrev, liveNext } = conn;
    if (livePrev !== undefined) livePrev.liveNext = liveNext;
    else if (this.#head === conn) this.#head = liveNext;
    else return;
    if (liveNext !== undefined) liveNext.livePrev = livePrev;
    conn.livePrev = undefined;
    conn.liveNext = undefined;
  }

  /** Aborts every connection; those that close at once unlink themselves meanwhile. */
  abortAll(): void {
    let conn = this.#head;
    while (conn !== undefined) {
      const next = conn.liveNext;
      conn.abort();
      conn = next;
    }
  }
}
