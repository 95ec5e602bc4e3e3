// This file is longer than 400 lines because one queue's held clients, their timeout and the idle
// period (its NeedPods, its abort signal and its two log lines) change together on every hold,
// release and endpoints change; split apart, each half would reach into the other's state.
import {
  type AcceptedConnection,
  type AcceptVerdict,
  type LoadBalancer,
  type Logger,
  type ProxySocketContext,
  type Service,
  type ServicePortName,
  servicePortNameString,
} from '@userspace-proxy/core';
import { LogLimiter } from '@userspace-proxy/core/sockets';
import {
  type IdlerHoldMessage,
  type IdlerReleaseMessage,
  type IdlerReleaseOutcome,
  idlerChannels,
} from './diagnostics.js';
import type { IdlerBudget } from './idler-budget.js';
import type { NeedPodsSignaller } from './need-pods.js';
import type { ResolvedIdlerOptions } from './options.js';

/** Running totals an Idler keeps; every queue adds to the same object. */
export interface IdlerCounters {
  held: number;
  handedOver: number;
  handOverFailures: number;
  timeouts: number;
  evictions: number;
  clientsClosed: number;
  closed: number;
  refusedAtLimit: number;
  /** Sum of the hold durations of released clients, ms (with `released`, the mean). */
  heldMsTotal: number;
  released: number;
  udpDropped: number;
  udpBuffered: number;
  udpReplayed: number;
}

/** What a queue shares with its Idler. */
export interface HoldQueueOwner {
  readonly options: ResolvedIdlerOptions;
  readonly budget: IdlerBudget;
  readonly log: Logger;
  readonly now: () => number;
  readonly counters: IdlerCounters;
  readonly needPods: NeedPodsSignaller;
  /** The queue holds nothing and no socket serves it: the Idler forgets it. */
  forget(queue: HoldQueue): void;
  /** Asks for `queue.dialSome` to be called, paced across the proxy. */
  handOver(queue: HoldQueue): void;
}

/**
 * The held TCP clients of one Service port, oldest first, across every listener of that port. It
 * outlives its sockets: when the last one closes (the hybrid moved the Service to the main proxier)
 * the clients stay held until endpoints come (`endpointsChanged`, which the hybrid calls after
 * forwarding them) or their timeout, as OpenShift's held connections survive the listener's close.
 *
 * One timer per queue, armed for the oldest client's deadline, makes the timeout exact per client:
 * clients are held in arrival order and all wait the same time, so the oldest expires first.
 */
export class HoldQueue {
  readonly key: string;
  readonly servicePort: ServicePortName;
  readonly #owner: HoldQueueOwner;
  /** Held clients → when they were held; a Map keeps insertion (arrival) order. */
  readonly #held = new Map<AcceptedConnection, number>();
  readonly #contexts = new Map<ProxySocketContext, () => void>();
  #service: Service;
  #lb: LoadBalancer;
  #log: Logger;
  #timer: NodeJS.Timeout | undefined;
  #needPodsTimer: NodeJS.Timeout | undefined;
  #lastNeedPodsAt = Number.NEGATIVE_INFINITY;
  /**
   * The signal of the NeedPods asked for since the port last had endpoints. It outlives the idle
   * period: a client that gives up does not make the pods moot (a probe with a 1 s timeout is the
   * usual first client), so only endpoints, the port going away or the Idler's close abort it.
   */
  #needPodsAbort: AbortController | undefined;
  /**
   * The idle period: from the first client held while the port had no endpoints until endpoints
   * came (`ending`, and over once the clients are handed over) or the port left the idling
   * proxier. Clients that come and go meanwhile (probes that give up) are one period: one info
   * line at its start and one at its end, not two per client.
   */
  #period:
    | {
        start: number;
        counts: Record<IdlerReleaseOutcome, number>;
        asked: boolean;
        ending: boolean;
      }
    | undefined;
  #handOverScheduled = false;
  readonly #limitLog = new LogLimiter();

  constructor(owner: HoldQueueOwner, key: string, context: ProxySocketContext) {
    this.#owner = owner;
    this.key = key;
    this.servicePort = context.servicePort;
    this.#service = context.service;
    this.#lb = context.loadBalancer;
    this.#log = context.logger;
  }

  /** The name in logs and messages, "ns/name:port". */
  get name(): string {
    return servicePortNameString(this.servicePort);
  }

  /** Clients held now. */
  get size(): number {
    return this.#held.size;
  }

  /** A held client closed on its own (one listener per queue, not a closure per client). */
  readonly #heldClosed = (connection: AcceptedConnection): void => {
    if (this.#held.has(connection)) this.#release(connection, 'client-closed');
  };

  /** A socket of this port opened: its endpoint changes now drive the hand-over. */
  attach(context: ProxySocketContext): void {
    this.#service = context.service;
    this.#lb = context.loadBalancer;
    this.#log = context.logger;
    const off = context.onEndpointsChanged(({ hasEndpoints }) => {
      if (hasEndpoints) this.endpointsChanged();
    });
    this.#contexts.set(context, off);
  }

  /** A socket of this port closed. Held clients stay (see the class comment). */
  detach(context: ProxySocketContext): void {
    this.#contexts.get(context)?.();
    this.#contexts.delete(context);
    if (this.#contexts.size > 0) return;
    if (this.#held.size === 0) {
      this.#endPeriod();
      return;
    }
    this.#log.debug(
      `the last listener of ${this.name} closed; ${this.#held.size} client(s) stay held until endpoints come or they time out`,
    );
  }

  /** True while a socket of this port is open. */
  get attached(): boolean {
    return this.#contexts.size > 0;
  }

  /** The verdict of the accept policy for a new client of this port. */
  accept(connection: AcceptedConnection): AcceptVerdict {
    if (this.#lb.serviceHasEndpoints(this.servicePort)) return 'proxy';
    const { options, budget, counters } = this.#owner;
    if (this.#held.size >= options.maxHeldPerServicePort) {
      const oldest = this.#held.keys().next().value;
      if (oldest !== undefined) {
        const suppressed = this.#limitLog.take();
        if (suppressed >= 0) {
          this.#log.warn(
            `${options.maxHeldPerServicePort} clients of idled ${this.name} are held already; closing the oldest${more(suppressed)}`,
          );
        }
        this.#release(oldest, 'hold-evicted');
        oldest.refuse('hold-evicted');
      }
    }
    if (!budget.tryAcquire()) {
      counters.refusedAtLimit++;
      const suppressed = this.#limitLog.take();
      if (suppressed >= 0) {
        this.#log.warn(
          `not holding a client of ${this.name}: ${budget.capacity} clients are held across the proxy${more(suppressed)}`,
        );
      }
      return 'refuse';
    }
    this.#held.set(connection, this.#owner.now());
    counters.held++;
    connection.onClose(this.#heldClosed);
    if (this.#period === undefined) this.#startPeriod();
    else {
      // Endpoints came and went again: the period goes on. Held again after a gap: ask again.
      this.#period.ending = false;
      if (this.#needPodsTimer === undefined) this.#ask();
    }
    this.#armTimeout();
    if (idlerChannels.hold.hasSubscribers) {
      const message: IdlerHoldMessage = {
        service: this.name,
        protocol: 'TCP',
        held: this.#held.size,
      };
      idlerChannels.hold.publish(message);
    }
    return 'hold';
  }

  /**
   * Hands the held clients over, oldest first, if the port has endpoints now. Runs after the
   * caller returns (a microtask), since it is called from the Proxier's endpoint handler.
   */
  endpointsChanged(): void {
    if (this.#handOverScheduled) return;
    // Nobody held and no idle period to end (its NeedPods may not even have been sent yet).
    if (this.#held.size === 0 && this.#period === undefined) return;
    this.#handOverScheduled = true;
    queueMicrotask(() => {
      this.#handOverScheduled = false;
      if (!this.#lb.serviceHasEndpoints(this.servicePort)) return;
      // The pods came: what was asked for is moot (the unidle hook may stop retrying).
      this.#endNeedPods();
      this.#handOver();
      if (this.#period !== undefined) this.#period.ending = true;
      if (this.#held.size === 0) this.#endPeriod();
    });
  }

  /** Closes every held client (the Idler closes) and stops the timers. */
  close(): void {
    this.refuseAll('idler-closed');
    for (const off of this.#contexts.values()) off();
    this.#contexts.clear();
  }

  /**
   * Refuses every held client with `reason` (RST for those that sent bytes), aborts the NeedPods
   * signal and stops the timers: the Idler closes, or the Service port went away (deleted, port
   * removed, protocol changed), so nothing will ever hand these clients over.
   */
  refuseAll(reason: string): void {
    for (const connection of [...this.#held.keys()]) {
      this.#release(connection, 'closed');
      connection.refuse(reason);
    }
    this.#endPeriod();
  }

  #handOver(): void {
    if (this.#held.size === 0) return;
    this.#log.info(`${this.name} has endpoints: handing over ${this.#held.size} held client(s)`);
    this.#owner.handOver(this);
  }

  /**
   * Hands up to `max` of the oldest held clients to the socket's dial; returns how many dials it
   * started (`onDialEnd` is called once for each when it ends). None while the port has no
   * endpoints (they went again, or the idling proxier dropped the port from its load balancer): the
   * clients stay held until the next endpoints change or their timeout.
   */
  dialSome(max: number, onDialEnd: (connected: boolean) => void): number {
    let n = 0;
    // Deleting the entry being visited is safe in a Map iteration: the loop is O(dialled).
    for (const connection of this.#held.keys()) {
      if (n >= max || !this.#lb.serviceHasEndpoints(this.servicePort)) break;
      this.#release(connection, 'handed-over');
      if (!connection.proxy(onDialEnd)) continue;
      n++;
      connection.onClose(this.#handedOverClosed);
    }
    return n;
  }

  /** A handed-over client closed: one that never reached an endpoint is a hand-over failure. */
  readonly #handedOverClosed = (c: AcceptedConnection): void => {
    if (c.endpoint !== '') return;
    this.#owner.counters.handOverFailures++;
    if (idlerChannels.handOverFailed.hasSubscribers) {
      idlerChannels.handOverFailed.publish({ service: this.name, protocol: 'TCP' });
    }
  };

  #release(connection: AcceptedConnection, outcome: IdlerReleaseOutcome): void {
    const heldAt = this.#held.get(connection);
    if (heldAt === undefined) return;
    this.#held.delete(connection);
    const { budget, counters } = this.#owner;
    budget.release();
    const heldMs = this.#owner.now() - heldAt;
    counters.held--;
    counters.released++;
    counters.heldMsTotal += heldMs;
    if (outcome === 'handed-over') counters.handedOver++;
    else if (outcome === 'hold-timeout') counters.timeouts++;
    else if (outcome === 'hold-evicted') counters.evictions++;
    else if (outcome === 'client-closed') counters.clientsClosed++;
    else counters.closed++;
    if (this.#period !== undefined) this.#period.counts[outcome]++;
    if (idlerChannels.release.hasSubscribers) {
      const message: IdlerReleaseMessage = {
        service: this.name,
        protocol: 'TCP',
        outcome,
        heldMs,
        held: this.#held.size,
      };
      idlerChannels.release.publish(message);
    }
    if (this.#held.size === 0) {
      // Nobody to time out or to ask for: the timers stop; the period ends with endpoints.
      this.#stopTimers();
      if (this.#period?.ending === true || !this.attached) this.#endPeriod();
    }
  }

  #startPeriod(): void {
    const start = this.#owner.now();
    this.#period = {
      start,
      counts: {
        'handed-over': 0,
        'hold-timeout': 0,
        'hold-evicted': 0,
        'client-closed': 0,
        closed: 0,
      },
      asked: false,
      ending: false,
    };
    this.#log.info(`${this.name} has no endpoints: holding its clients and asking for pods`);
    this.#ask();
  }

  /** Asks for pods now, or when `needPodsIntervalMs` has passed since the last time. */
  #ask(): void {
    const interval = this.#owner.options.needPodsIntervalMs;
    const since = this.#owner.now() - this.#lastNeedPodsAt;
    if (since >= interval) this.#signal();
    else this.#armNeedPods(interval - since);
  }

  #signal(): void {
    const period = this.#period;
    if (period === undefined) return;
    const repeat = period.asked;
    period.asked = true;
    this.#lastNeedPodsAt = this.#owner.now();
    this.#needPodsAbort ??= new AbortController();
    const { signal } = this.#needPodsAbort;
    this.#owner.needPods.send(this.#service, this.servicePort, 'TCP', repeat, signal);
    this.#armNeedPods(this.#owner.options.needPodsIntervalMs);
  }

  #armNeedPods(delayMs: number): void {
    clearTimeout(this.#needPodsTimer);
    this.#needPodsTimer = setTimeout(
      () => {
        this.#needPodsTimer = undefined;
        // Asked again only while the Service is still idled here: once its last listener closed
        // (it moved to the main proxier, or went away) its held clients wait, and ask nobody.
        if (
          this.#held.size > 0 &&
          this.attached &&
          !this.#lb.serviceHasEndpoints(this.servicePort)
        ) {
          this.#signal();
        }
      },
      Math.max(1, delayMs),
    );
    this.#needPodsTimer.unref();
  }

  /** The period is over (endpoints came, or the port left): one summary line; forgotten if detached. */
  #endPeriod(): void {
    const period = this.#period;
    this.#period = undefined;
    this.#stopTimers();
    this.#endNeedPods();
    if (period !== undefined) {
      const seconds = ((this.#owner.now() - period.start) / 1000).toFixed(1);
      const parts = Object.entries(period.counts)
        .filter(([, n]) => n > 0)
        .map(([outcome, n]) => `${n} ${outcome}`);
      this.#log.info(`${this.name} held clients for ${seconds} s: ${parts.join(', ')}`);
    }
    if (!this.attached && this.#held.size === 0) this.#owner.forget(this);
  }

  #endNeedPods(): void {
    this.#needPodsAbort?.abort();
    this.#needPodsAbort = undefined;
  }

  #stopTimers(): void {
    clearTimeout(this.#timer);
    clearTimeout(this.#needPodsTimer);
    this.#timer = undefined;
    this.#needPodsTimer = undefined;
  }

  #armTimeout(): void {
    if (this.#timer !== undefined) return;
    const oldest = this.#held.values().next().value;
    if (oldest === undefined) return;
    const delay = oldest + this.#owner.options.holdTimeoutMs - this.#owner.now();
    this.#timer = setTimeout(this.#expire, Math.max(1, delay));
    this.#timer.unref();
  }

  readonly #expire = (): void => {
    this.#timer = undefined;
    const deadline = this.#owner.now() - this.#owner.options.holdTimeoutMs;
    let expired = 0;
    for (const [connection, heldAt] of [...this.#held]) {
      if (heldAt > deadline) break;
      expired++;
      this.#release(connection, 'hold-timeout');
      connection.refuse('hold-timeout');
    }
    if (expired > 0) {
      this.#log.info(`timed out ${expired} held client(s) of ${this.name} waiting for endpoints`);
    }
    this.#armTimeout();
  };
}

function more(suppressed: number): string {
  return suppressed > 0 ? ` (${suppressed} similar suppressed)` : '';
}
