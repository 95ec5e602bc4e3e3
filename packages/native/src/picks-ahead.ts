/**
 * Endpoints picked ahead for one native listener: a ring per helper thread of endpoints already
 * chosen by the load balancer's `nextEndpoint`, which the helper dials the moment it accepts (no
 * round trip through Node's event loop per connection). Only for a Service without session
 * affinity on core's round-robin balancer, whose picks do not depend on the client; topped up as
 * the helper reports the accepts that used them, replaced (a new epoch) when the endpoints change.
 *
 * A thread's ring starts with {@link FIRST_RING} picks and doubles (up to {@link PICK_RING}) at each
 * top-up and each time an accept finds it empty, so the 10 000 idle listeners of a large cluster
 * cost a few picks each, on both sides, while a listener in use reaches the full ring within
 * a few accepts (and then needs one 'P' per 16 accepts, not one per accept).
 */
import net from 'node:net';
import type { LoadBalancer, ServicePortName } from '@userspace-proxy/core';
import { splitHostPort } from '@userspace-proxy/core/sockets';
import type { NativeTcpEngine } from './engine.js';
import { PICK_RING } from './relay-protocol.js';

type Target = { readonly host: string; readonly port: number };

/** What the picks go to: the TCP engine, or the UDP one (udp-engine.ts). */
type PicksEngine = Pick<NativeTcpEngine, 'helperThreads' | 'picks'>;

/**
 * The picks a thread's ring starts with: enough for a few connections at once without a round trip,
 * little enough that an idle listener costs next to nothing (a quarter KiB in the helper per thread).
 */
export const FIRST_RING = 4;

/** The least time between two re-picks caused by failed first picks, ms. */
const REPICK_AFTER_FAILURE_MS = 100;

/** The fast path's state, for tests and diagnostics (NativeTcpProxySocket.picksAhead). */
export interface PicksAheadState {
  /** The epoch of the current picks. */
  readonly epoch: number;
  /** Per helper thread, the epoch whose picks it holds ('p'). */
  readonly taken: readonly number[];
  /** Per helper thread, the ring's size: {@link FIRST_RING}, doubled at each top-up and each miss. */
  readonly ring: readonly number[];
}

/** Endpoints parsed, shared by every listener (the parse depends on the text alone). */
const TARGETS = new Map<string, Target | null>();
/** Past this many endpoints the cache starts again: bounded, and large clusters still hit it. */
const MAX_TARGETS = 16_384;

/** See the module comment. */
export class PicksAhead {
  readonly #engine: PicksEngine;
  readonly #listener: number;
  readonly #servicePort: ServicePortName;
  readonly #lb: LoadBalancer;
  /** The current ring's epoch; accepts that report another one used a ring since replaced. */
  #epoch = 0;
  /** Picks sent per thread in this epoch and not yet reported used. */
  #have: number[] = [];
  /** Per thread, the epoch the helper said it holds ('p'). */
  #taken: number[] = [];
  /** Per thread, the ring's size: {@link FIRST_RING}, doubled at each top-up and each miss. */
  #cap: number[] = [];
  /** Per thread, whether picks were sent in this epoch (a miss then means the ring ran dry). */
  #fed: boolean[] = [];
  #stopped = false;
  #lastRepick = Number.NEGATIVE_INFINITY;

  constructor(
    engine: PicksEngine,
    listener: number,
    servicePort: ServicePortName,
    lb: LoadBalancer,
  ) {
    this.#engine = engine;
    this.#listener = listener;
    this.#servicePort = servicePort;
    this.#lb = lb;
    // Filled arrays (not grown by index): a few bytes per listener, 10 000 listeners in a cluster.
    const threads = engine.helperThreads;
    this.#taken = new Array<number>(threads).fill(0);
    this.#cap = new Array<number>(threads).fill(FIRST_RING);
  }

  /** A new epoch: every thread's ring is replaced by fresh picks (none when there are no endpoints). */
  refill(): void {
    if (this.#stopped) return;
    this.#epoch = (this.#epoch % 0xffff_fffe) + 1;
    const threads = this.#engine.helperThreads;
    this.#have = new Array<number>(threads).fill(0);
    this.#fed = new Array<boolean>(threads).fill(false);
    for (let t = 0; t < threads; t++) this.#send(t, this.#capOf(t), true);
  }

  /** An accept on `thread` used a pick of ring `epoch`: tops that thread up once a quarter is used. */
  used(thread: number, epoch: number): void {
    if (this.#stopped || epoch !== this.#epoch) return;
    const have = Math.max(0, (this.#have[thread] ?? 1) - 1);
    this.#have[thread] = have;
    let cap = this.#capOf(thread);
    // Topped up every quarter: a thread accepts up to 64 in one turn. A ring in use doubles at each
    // top-up until it holds PICK_RING, so a busy listener soon needs a 'P' every 16 accepts only.
    if (have > cap - Math.max(1, cap / 4)) return;
    if (cap < PICK_RING) {
      cap = Math.min(PICK_RING, cap * 2);
      this.#cap[thread] = cap;
    }
    this.#send(thread, cap - have);
  }

  /**
   * An accept on `thread` found its ring empty (the per-accept path served it). If the ring had
   * picks in this epoch, the accepts outran the top-ups: the ring doubles. Either way the thread is
   * topped up: the balancer may have learnt the Service or its endpoints with no change reported
   * to this socket (a Proxier registers a Service with its balancer after opening its socket).
   */
  missed(thread: number): void {
    if (this.#stopped || thread >= this.#have.length) return;
    let cap = this.#capOf(thread);
    if (this.#fed[thread] === true && cap < PICK_RING) {
      cap = Math.min(PICK_RING, cap * 2);
      this.#cap[thread] = cap;
    }
    const have = this.#have[thread] ?? 0;
    if (have <= cap / 2) this.#send(thread, cap - have);
  }

  /**
   * A first pick failed: the balancer has heard of it (outlier ejection may have taken the endpoint
   * out of the rotation), so the rings are picked afresh, at most every {@link REPICK_AFTER_FAILURE_MS}.
   */
  failed(): void {
    const now = performance.now();
    if (now - this.#lastRepick < REPICK_AFTER_FAILURE_MS) return;
    this.#lastRepick = now;
    this.refill();
  }

  /** The helper died: its rings are gone; {@link refill} after it listens again. */
  reset(): void {
    this.#have = [];
    this.#taken = new Array<number>(this.#engine.helperThreads).fill(0);
  }

  /** The helper's 'p': `thread` holds epoch `epoch`'s picks. */
  taken(thread: number, epoch: number): void {
    this.#taken[thread] = epoch;
  }

  /** See NativeTcpProxySocket.picksAhead. */
  state(): PicksAheadState {
    const threads = this.#engine.helperThreads;
    return {
      epoch: this.#epoch,
      taken: Array.from({ length: threads }, (_, t) => this.#taken[t] ?? 0),
      ring: Array.from({ length: threads }, (_, t) => this.#capOf(t)),
    };
  }

  #capOf(thread: number): number {
    return this.#cap[thread] ?? FIRST_RING;
  }

  /** No more picks ahead (affinity turned on, the socket closes): the rings are emptied. */
  stop(): void {
    if (this.#stopped) return;
    this.#epoch = (this.#epoch % 0xffff_fffe) + 1;
    const threads = this.#engine.helperThreads;
    for (let t = 0; t < threads; t++) this.#engine.picks(this.#listener, t, this.#epoch, []);
    this.#stopped = true;
  }

  /** Sends up to `n` fresh picks to `thread`; none are sent, unless `always`, when none are found. */
  #send(thread: number, n: number, always = false): void {
    const picks: Target[] = [];
    for (let i = 0; i < n; i++) {
      let endpoint: string;
      try {
        endpoint = this.#lb.nextEndpoint(this.#servicePort, null, false);
      } catch {
        break; // no endpoints: the accepts that find the ring empty take the per-accept path
      }
      const target = this.#target(endpoint);
      if (target !== null) picks.push(target);
    }
    this.#have[thread] = (this.#have[thread] ?? 0) + picks.length;
    if (picks.length > 0) this.#fed[thread] = true;
    // An empty 'P' matters in a new epoch only: it empties the ring of the old endpoints.
    if (picks.length > 0 || always) this.#engine.picks(this.#listener, thread, this.#epoch, picks);
  }

  /** "ip:port" as host and port; null for what the per-accept path would fail as invalid. */
  #target(endpoint: string): Target | null {
    let t = TARGETS.get(endpoint);
    if (t !== undefined) return t;
    const split = splitHostPort(endpoint);
    t =
      split === undefined || net.isIP(split.host) === 0 || split.port === 0
        ? null
        : { host: split.host, port: split.port };
    if (TARGETS.size >= MAX_TARGETS) TARGETS.clear();
    TARGETS.set(endpoint, t);
    return t;
  }
}
