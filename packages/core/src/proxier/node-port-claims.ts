import { PortConflictError } from '../errors.js';
import type { Protocol } from '../model/model.js';
import { joinHostPort } from '../model/service-port-name.js';

/** The result of {@link NodePortClaims.claim}. */
export type ClaimResult =
  | { readonly ok: true }
  | { readonly ok: false; readonly owner: string; readonly error: PortConflictError };

/** The display form of a claim: "10.0.0.1:30080/TCP", or "*:30080/TCP" for every address. */
export function claimKeyString(ip: string | null, port: number, protocol: Protocol): string {
  return `${ip === null ? `*:${port}` : joinHostPort(ip, port)}/${protocol}`;
}

const ANY = '*';

/**
 * Who owns each (address, port, protocol) the Proxier listens on outside its own proxy ports: node
 * ports in both modes, and in service-port-portal mode every Service address. It only keeps the books;
 * the caller opens the socket after a successful claim and releases the claim when it closes it.
 *
 * A claim on every address (ip null) conflicts with any claim on the same port and protocol by another
 * owner, and the other way round, as the kernel would refuse the bind anyway; reporting it here names
 * the Service that holds the port instead of an anonymous EADDRINUSE. An owner may claim the same key
 * again (idempotent). A refused owner is remembered as waiting on that port and protocol; when a claim
 * there is released, {@link NodePortClaims.release} returns the waiters so the caller can retry them —
 * this is how a Service gets a port its conflicting owner gave up. Every operation is O(claims on that
 * port and protocol), never O(all claims).
 */
export class NodePortClaims {
  /** "port/protocol" → (ip or "*") → owner. */
  readonly #byPort = new Map<string, Map<string, string>>();
  /** "port/protocol" → owners refused there, in the order they asked. */
  readonly #waiters = new Map<string, Set<string>>();
  #size = 0;

  /**
   * Claims `ip:port/protocol` (every address when `ip` is null) for `owner`. On conflict the owner is
   * remembered as a waiter and the result carries a PortConflictError naming both owners.
   */
  claim(ip: string | null, port: number, protocol: Protocol, owner: string): ClaimResult {
    const group = groupKey(port, protocol);
    const ipKey = ip ?? ANY;
    let owners = this.#byPort.get(group);
    const holder = owners === undefined ? undefined : conflictingOwner(owners, ipKey, owner);
    if (holder !== undefined) {
      let waiting = this.#waiters.get(group);
      if (waiting === undefined) {
        waiting = new Set();
        this.#waiters.set(group, waiting);
      }
      waiting.add(owner);
      const key = claimKeyString(ip, port, protocol);
      return { ok: false, owner: holder, error: new PortConflictError(key, owner, holder) };
    }
    if (owners === undefined) {
      owners = new Map();
      this.#byPort.set(group, owners);
    }
    if (!owners.has(ipKey)) this.#size++;
    owners.set(ipKey, owner);
    this.#waiters.get(group)?.delete(owner);
    return { ok: true };
  }

  /**
   * Releases a claim held by `owner`; a claim it does not hold is left alone. Returns the owners that
   * were waiting on this port and protocol (and forgets them): the caller retries them, and any still
   * in conflict waits again.
   */
  release(ip: string | null, port: number, protocol: Protocol, owner: string): string[] {
    const group = groupKey(port, protocol);
    const owners = this.#byPort.get(group);
    const ipKey = ip ?? ANY;
    if (owners?.get(ipKey) !== owner) return [];
    owners.delete(ipKey);
    this.#size--;
    if (owners.size === 0) this.#byPort.delete(group);
    const waiting = this.#waiters.get(group);
    if (waiting === undefined) return [];
    this.#waiters.delete(group);
    return [...waiting];
  }

  /** Stops `owner` waiting on a port and protocol, when it goes away before getting the port. */
  withdraw(port: number, protocol: Protocol, owner: string): void {
    const group = groupKey(port, protocol);
    const waiting = this.#waiters.get(group);
    if (waiting === undefined) return;
    waiting.delete(owner);
    if (waiting.size === 0) this.#waiters.delete(group);
  }

  /** The owner of exactly this key, if any. */
  owner(ip: string | null, port: number, protocol: Protocol): string | undefined {
    return this.#byPort.get(groupKey(port, protocol))?.get(ip ?? ANY);
  }

  /** The owners waiting on a port and protocol, for inspection and tests. */
  waiters(port: number, protocol: Protocol): string[] {
    return [...(this.#waiters.get(groupKey(port, protocol)) ?? [])];
  }

  /** How many claims are held. */
  get size(): number {
    return this.#size;
  }
}

function groupKey(port: number, protocol: Protocol): string {
  return `${port}/${protocol}`;
}

/** Another owner's claim that `ipKey` would collide with: the same address, or either is "*". */
function conflictingOwner(
  owners: Map<string, string>,
  ipKey: string,
  owner: string,
): string | undefined {
  if (ipKey === ANY) {
    for (const holder of owners.values()) if (holder !== owner) return holder;
    return undefined;
  }
  for (const key of [ipKey, ANY]) {
    const holder = owners.get(key);
    if (holder !== undefined && holder !== owner) return holder;
  }
  return undefined;
}
