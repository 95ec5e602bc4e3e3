/**
 * Endpoints picked ahead for one native listener: a ring per helper thread of endpoints already
 * chosen by the load balancer's `nextEndpoint`, which the helper dials the moment it accepts (no
 * round trip through Node's event loop per connection). Only for a Service without session
 * affinity on core's round-robin balancer, whose picks do not depend on the client; topped up as
 * the helper reports the accepts that used them, replaced (a new epoch) when the endpoints change.
 */
import net from 'node:net';
import type { LoadBalancer, ServicePortName } from '@userspace-proxy/core';
import { splitHostPort } from '@userspace-proxy/core/sockets';
import type { NativeTcpEngine } from './engine.js';
import { PICK_RING } from './relay-protocol.js';

type Target = { readonly host: string; readonly port: number };

/** What the picks go to: the TCP engine, or the UDP one (udp-engine.ts). */
type PicksEngine = Pick<NativeTcpEngine, 'helperThreads' | 'picks'>;

/** Picks left in a thread's ring (as Node counts them) at which it is topped up. */
const TOP_UP_AT = (PICK_RING * 3) / 4;

/** The least time between two re-picks caused by failed first picks, ms. */
const REPICK_AFTER_FAILURE_MS = 100;

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
  #stopped = false;
  #lastRepick = Number.NEGATIVE_INFINITY;
  readonly #targets = new Map<string, Target | null>();

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
  }

  /** A new epoch: every thread's ring is replaced by fresh picks (none when there are no endpoints). */
  refill(): void {
    if (this.#stopped) return;
    this.#epoch = (this.#epoch % 0xffff_fffe) + 1;
    const threads = this.#engine.helperThreads;
    this.#have = new Array<number>(threads).fill(0);
    for (let t = 0; t < threads; t++) this.#send(t, PICK_RING, true);
  }

  /** An accept on `thread` used a pick of ring `epoch`: tops that thread up once half is used. */
  used(thread: number, epoch: number): void {
    if (this.#stopped || epoch !== this.#epoch) return;
    const have = (this.#have[thread] ?? 1) - 1;
    this.#have[thread] = have;
    // Topped up every quarter: a helper thread accepts up to 64 connections in one turn.
    if (have <= TOP_UP_AT) this.#send(thread, PICK_RING - have);
  }

  /**
   * An accept on `thread` found its ring empty (the per-accept path served it): the balancer may
   * have learnt the Service or its endpoints with no change reported to this socket (a Proxier
   * registers a Service with its balancer after opening its socket), so the thread is topped up.
   */
  missed(thread: number): void {
    if (this.#stopped || thread >= this.#have.length) return;
    const have = this.#have[thread] ?? 0;
    if (have <= PICK_RING / 2) this.#send(thread, PICK_RING - have);
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
    this.#taken = [];
  }

  /** The helper's 'p': `thread` holds epoch `epoch`'s picks. */
  taken(thread: number, epoch: number): void {
    this.#taken[thread] = epoch;
  }

  /** See NativeTcpProxySocket.picksAhead. */
  state(): { epoch: number; taken: readonly number[] } {
    const threads = this.#engine.helperThreads;
    return {
      epoch: this.#epoch,
      taken: Array.from({ length: threads }, (_, t) => this.#taken[t] ?? 0),
    };
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
    // An empty 'P' matters in a new epoch only: it empties the ring of the old endpoints.
    if (picks.length > 0 || always) this.#engine.picks(this.#listener, thread, this.#epoch, picks);
  }

  /** "ip:port" as host and port; null for what the per-accept path would fail as invalid. */
  #target(endpoint: string): Target | null {
    let t = this.#targets.get(endpoint);
    if (t !== undefined) return t;
    const split = splitHostPort(endpoint);
    t =
      split === undefined || net.isIP(split.host) === 0 || split.port === 0
        ? null
        : { host: split.host, port: split.port };
    if (this.#targets.size >= 1024) this.#targets.clear();
    this.#targets.set(endpoint, t);
    return t;
  }
}
