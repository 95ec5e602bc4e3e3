import { isIP } from 'node:net';
import { MalformedSourceAddressError } from '../errors.js';
import type { Addr } from '../model/model.js';
import type { AffinityType } from './load-balancer.js';
import type { OutlierTracker } from './outlier-ejection.js';
import { type RandomSource, shuffled } from './random.js';

/**
 * One Service port's state in the round-robin balancer (reference §3.1–3.2): the shuffled rotation
 * and, with ClientIP affinity, a record per client IP. The balancer keeps one per Service port and
 * decides when to create, replace or drop it; the picking itself happens here.
 */

interface AffinityRecord {
  endpoint: string;
  lastUsed: number;
}

const EMPTY: readonly string[] = Object.freeze([]);

/** The affinity table of every state without records: always empty, never written to. */
const NO_RECORDS = new Map<string, AffinityRecord>();

/** Everything the balancer knows about one Service port. */
export class BalancerState {
  /** A frozen, shuffled copy: replaced on change, never mutated, so it can be handed out. */
  endpoints: readonly string[] = EMPTY;
  /** The next position in the rotation, shared by every client of the port. */
  index = 0;
  /** Affinity is on: `affinityType` is "ClientIP" (kept in step by setAffinityType). */
  sticky: boolean;
  /** As given to newService; "" until newService for a port endpoints created. */
  affinityType: AffinityType;
  /** How long a client keeps its endpoint after its last use, in whole seconds. */
  ttlSeconds: number;
  /**
   * Client IP → record; insertion order is the order of last assignment (eviction order). Until the
   * first record, the one shared empty Map (never written to): a Map costs about 300 bytes, and most
   * Services have no affinity (10 000 Services: 3 MB).
   */
  affinity: Map<string, AffinityRecord> = NO_RECORDS;
  /** Set by newService; a state only endpoints created is dropped once they are gone. */
  registered = false;
  /** False once removed from the balancer, so cached references to it are looked up again. */
  live = true;
  /** Whether the record limit was reported since the records last fell below it. */
  warnedLimit = false;
  /** Dial failures and ejections; created on the first reported failure. */
  outliers: OutlierTracker | undefined;
  /**
   * The endpoint whose failed dial was reported last. The dialer reports a failure and asks for its
   * retry's endpoint in the same synchronous step, so the next pick with `reset` is that retry.
   */
  failed: string | undefined;

  constructor(affinityType: AffinityType, ttlSeconds: number) {
    this.affinityType = affinityType;
    this.sticky = affinityType === 'ClientIP';
    this.ttlSeconds = ttlSeconds;
  }

  /** The next endpoint of the rotation. The caller has checked that there is one. */
  next(): string {
    const i = this.index;
    this.index = i + 1 === this.endpoints.length ? 0 : i + 1;
    return this.endpoints[i] as string;
  }

  /**
   * The next endpoint when failures were reported: ejected endpoints are skipped (unless every one
   * is, which the ejection cap prevents), and a retry right after a reported failure (`retry`)
   * takes the next endpoint other than the failed one *without* advancing the rotation, so a failed
   * attempt does not also use up the next client's slot.
   */
  pick(now: number, retry: boolean): string {
    const failed = this.failed;
    this.failed = undefined;
    const outliers = this.outliers?.active(now) ? this.outliers : undefined;
    const list = this.endpoints;
    const n = list.length;
    if (retry && failed !== undefined) {
      for (let k = 0; k < n; k++) {
        const endpoint = list[(this.index + k) % n] as string;
        if (endpoint !== failed && !outliers?.isEjected(endpoint, now)) return endpoint;
      }
    }
    if (outliers === undefined) return this.next();
    for (let k = 0; k < n; k++) {
      const i = (this.index + k) % n;
      const endpoint = list[i] as string;
      if (!outliers.isEjected(endpoint, now)) {
        this.index = i + 1 === n ? 0 : i + 1;
        return endpoint;
      }
    }
    return this.next();
  }

  /** Whether a pick must go through {@link pick} rather than the plain rotation. */
  needsPick(): boolean {
    return this.outliers !== undefined || this.failed !== undefined;
  }

  /**
   * The endpoint of a client with ClientIP affinity: its record's while fewer than `ttlSeconds` whole
   * seconds have passed since its last use (a sticky hit leaves the rotation alone), else the next
   * of the rotation, recorded. `reset` (after a failed dial) skips the record and overwrites it. At
   * `maxRecords` the record assigned longest ago makes room and `onLimit` is told.
   * @throws MalformedSourceAddressError when `srcAddr` is null or not an IP.
   */
  nextSticky(
    srcAddr: Addr | null,
    now: number,
    reset: boolean,
    maxRecords: number,
    onLimit: (state: BalancerState) => void,
  ): string {
    const ip = clientIP(srcAddr);
    const record = this.affinity.get(ip);
    // Only validated addresses become keys, so a hit needs no parsing.
    if (record === undefined && isIP(ip) === 0) throw new MalformedSourceAddressError(ip);
    if (
      record !== undefined &&
      !reset &&
      !this.#expired(record, now) &&
      !this.outliers?.isEjected(record.endpoint, now)
    ) {
      record.lastUsed = now;
      return record.endpoint;
    }
    const endpoint = this.needsPick() ? this.pick(now, reset) : this.next();
    if (record !== undefined) {
      // Re-inserted so that the Map's order stays the order of last assignment.
      record.endpoint = endpoint;
      record.lastUsed = now;
      this.affinity.delete(ip);
      this.affinity.set(ip, record);
    } else {
      if (this.affinity === NO_RECORDS) this.affinity = new Map();
      if (this.affinity.size >= maxRecords) {
        const oldest = this.affinity.keys().next();
        if (!oldest.done) this.affinity.delete(oldest.value);
        onLimit(this);
      }
      this.affinity.set(ip, { endpoint, lastUsed: now });
    }
    return endpoint;
  }

  /** Sets the affinity type; anything but ClientIP turns stickiness off and drops the records. */
  setAffinityType(affinityType: AffinityType): void {
    this.affinityType = affinityType;
    this.sticky = affinityType === 'ClientIP';
    if (!this.sticky) this.affinity = NO_RECORDS;
  }

  /**
   * Takes a new endpoint list (duplicate-free). The same set changes nothing, so a resync keeps the
   * order, the rotation and every record; another set is shuffled afresh, the rotation restarts and
   * records pointing at endpoints that left are dropped. Returns whether anything changed.
   */
  replaceEndpoints(list: readonly string[], random: RandomSource): boolean {
    if (sameMembers(this.endpoints, list)) return false;
    if (this.affinity.size > 0) {
      const present = new Set(list);
      for (const [ip, record] of this.affinity) {
        if (!present.has(record.endpoint)) this.affinity.delete(ip);
      }
    }
    this.endpoints = Object.freeze(shuffled(list, random));
    this.index = 0;
    this.outliers?.retain(new Set(list));
    return true;
  }

  /** No endpoints and no records; the affinity type and TTL stay (reference resetService). */
  clearEndpoints(): void {
    this.endpoints = EMPTY;
    this.index = 0;
    this.affinity = NO_RECORDS;
    this.outliers = undefined;
    this.failed = undefined;
  }

  /** Drops records at or past the TTL (whole seconds, as the reference). */
  dropExpired(now: number, maxRecords: number): void {
    for (const [ip, record] of this.affinity) {
      if (this.#expired(record, now)) this.affinity.delete(ip);
    }
    if (this.affinity.size < maxRecords) this.warnedLimit = false;
  }

  #expired(record: AffinityRecord, now: number): boolean {
    return Math.trunc((now - record.lastUsed) / 1000) >= this.ttlSeconds;
  }
}

/** The affinity key of a client: its IP, with IPv4-mapped IPv6 folded to IPv4 as Go's net does. */
function clientIP(srcAddr: Addr | null): string {
  const address: unknown =
    typeof srcAddr === 'object' && srcAddr !== null ? srcAddr.address : undefined;
  if (typeof address !== 'string') {
    throw new MalformedSourceAddressError(srcAddr === null ? 'null' : typeof address);
  }
  if (address.startsWith('::ffff:') && isIP(address.slice(7)) === 4) return address.slice(7);
  return address;
}

/** Both lists are duplicate-free (buildPortsToEndpointsMap), so equal size + inclusion is equality. */
function sameMembers(current: readonly string[], next: readonly string[]): boolean {
  if (current.length !== next.length) return false;
  const set = new Set(current);
  for (const endpoint of next) if (!set.has(endpoint)) return false;
  return true;
}
