import {
  type AcceptPolicy,
  type AcceptPolicyFactory,
  componentLogger,
  type Logger,
  noopLogger,
  type ProxySocketContext,
  type Service,
  servicePortNameString,
} from '@userspace-proxy/core';
import { HoldQueue, type HoldQueueOwner, type IdlerCounters } from './hold-queue.js';
import { IdlerBudget } from './idler-budget.js';
import { NeedPodsSignaller } from './need-pods.js';
import { type IdlerOptions, type ResolvedIdlerOptions, resolveIdlerOptions } from './options.js';
import { UdpGate } from './udp-gate.js';

/** Held clients handed to the dial per event-loop turn (see `Idler.#handOver`). */
export const HAND_OVER_BATCH = 64;

/** What an {@link Idler} has done since it was made, and what it holds now. */
export interface IdlerStats {
  /** TCP clients held now, in total. */
  readonly heldNow: number;
  /** TCP clients held now per Service port ("ns/name:port"); ports holding none are absent. */
  readonly heldByServicePort: Readonly<Record<string, number>>;
  /** NeedPods sent (Event and hook together count once). */
  readonly needPodsSent: number;
  /** Recorder or unidle-hook calls that threw. */
  readonly needPodsFailures: number;
  /** Held clients handed to the socket's dial. */
  readonly handedOver: number;
  /** Handed-over clients that closed before they reached an endpoint. */
  readonly handOverFailures: number;
  /** Held clients closed after `holdTimeoutMs`. */
  readonly timeouts: number;
  /** Held clients closed to make room under `maxHeldPerServicePort`. */
  readonly evictions: number;
  /** Held clients that closed on their own. */
  readonly clientsClosed: number;
  /** New clients refused because `maxHeldTotal` were held. */
  readonly refusedAtLimit: number;
  /** Released clients, and the sum of their hold durations (ms): the mean hold. */
  readonly released: number;
  readonly heldMsTotal: number;
  /** UDP datagrams dropped, buffered and replayed while idled. */
  readonly udpDropped: number;
  readonly udpBuffered: number;
  readonly udpReplayed: number;
}

/** Options of an {@link Idler}: {@link IdlerOptions} and a budget to share. */
export interface IdlerConfig extends IdlerOptions {
  /**
   * The global cap to share with other Idlers of the same proxy. Default: a new one of
   * `maxHeldTotal` (10 000).
   */
  budget?: IdlerBudget;
}

/**
 * The shared state of one proxy's idling sockets: the options, the global budget, the held clients
 * of every Service port (which outlive their sockets), the NeedPods signaller and the counters.
 * Make one per proxy; give its `acceptPolicy` to core's TCP socket, or pass the Idler to
 * `createIdlingProxySocketFactory`, and to the `HybridProxier`.
 */
export class Idler {
  readonly options: ResolvedIdlerOptions;
  readonly budget: IdlerBudget;
  readonly log: Logger;
  readonly now: () => number;
  readonly needPods: NeedPodsSignaller;
  readonly counters: IdlerCounters = {
    held: 0,
    handedOver: 0,
    handOverFailures: 0,
    timeouts: 0,
    evictions: 0,
    clientsClosed: 0,
    closed: 0,
    refusedAtLimit: 0,
    heldMsTotal: 0,
    released: 0,
    udpDropped: 0,
    udpBuffered: 0,
    udpReplayed: 0,
  };
  readonly #queues = new Map<string, HoldQueue>();
  /**
   * The queues of each Service ("ns/name"): the hybrid asks `holds` on every endpoints event of
   * every Service, and a cluster may have thousands of idled ones, so no scan of every queue.
   */
  readonly #byService = new Map<string, Set<HoldQueue>>();
  readonly #gates = new Map<string, UdpGate>();
  readonly #owner: HoldQueueOwner;
  readonly #handOvers = new Set<HoldQueue>();
  #handOverTurn: NodeJS.Immediate | undefined;
  /** Hand-over dials started and not yet ended (connected or failed). */
  #dialsInFlight = 0;
  #closed = false;

  /** @throws InvalidOptionError for a bad option. */
  constructor(config: IdlerConfig = {}) {
    this.options = resolveIdlerOptions(config);
    this.budget = config.budget ?? new IdlerBudget(this.options.maxHeldTotal);
    this.log = componentLogger(config.logger ?? noopLogger, 'idler');
    this.now = config.now ?? (() => performance.now());
    this.needPods = new NeedPodsSignaller(config.recorder, config.unidleHook, this.log);
    this.#owner = {
      options: this.options,
      budget: this.budget,
      log: this.log,
      now: this.now,
      counters: this.counters,
      needPods: this.needPods,
      forget: (queue) => {
        if (this.#queues.get(queue.key) !== queue) return;
        this.#queues.delete(queue.key);
        const sp = queue.servicePort;
        const key = serviceKey(sp.namespace, sp.name);
        const set = this.#byService.get(key);
        set?.delete(queue);
        if (set?.size === 0) this.#byService.delete(key);
      },
      handOver: (queue) => this.#handOver(queue),
    };
  }

  /**
   * The accept policy of core's TCP socket for one listener: hold while its Service port has no
   * endpoints (within the bounds), proxy once it has; hand the held ones over when they come.
   */
  readonly acceptPolicy: AcceptPolicyFactory = (context: ProxySocketContext): AcceptPolicy => {
    const queue = this.#queue(context);
    queue.attach(context);
    return {
      accept: (connection) => {
        if (this.#closed) return 'refuse';
        return queue.accept(connection);
      },
      close: () => queue.detach(context),
    };
  };

  /**
   * The UDP gate of a Service port, made on first use; used by the idling UDP socket.
   * @internal the idler's own UDP socket calls it; not part of the contract.
   */
  udpGate(context: ProxySocketContext): UdpGate {
    const key = `${servicePortNameString(context.servicePort)}/UDP`;
    let gate = this.#gates.get(key);
    if (gate === undefined) {
      gate = new UdpGate(this, key, context, () => {
        if (this.#gates.get(key) === gate) this.#gates.delete(key);
      });
      this.#gates.set(key, gate);
    }
    return gate;
  }

  /** True while any Service port of `namespace/name` holds TCP clients: the hybrid keeps forwarding endpoints. */
  holds(namespace: string, name: string): boolean {
    for (const queue of this.#queuesOf(namespace, name)) if (queue.size > 0) return true;
    return false;
  }

  /**
   * Tells the held clients of `namespace/name` that its endpoints changed, for queues whose
   * sockets have closed (the hybrid calls it after forwarding endpoints to the idling proxier).
   */
  endpointsChanged(namespace: string, name: string): void {
    for (const queue of this.#queuesOf(namespace, name)) queue.endpointsChanged();
  }

  /**
   * The Service `namespace/name` changed or went away (`service` undefined): the held clients of
   * each of its TCP ports that `service` no longer has (the port was removed, renamed or changed
   * protocol, or the Service was deleted) are refused at once with reason `service-changed`, and
   * their NeedPods stops. Nothing would ever hand them over, so they would otherwise wait out
   * their hold timeout, and NeedPods would keep waking a Service that is gone. The hybrid calls
   * it on every Service update and delete; call it yourself when you use the idling proxier
   * without the hybrid.
   */
  serviceChanged(namespace: string, name: string, service?: Service): void {
    const keep = new Set(
      service === undefined
        ? []
        : (service.spec.ports ?? []).map(
            (port) =>
              `${servicePortNameString({ namespace, name, port: port.name ?? '' })}/${(port.protocol ?? 'TCP').toUpperCase()}`,
          ),
    );
    for (const queue of [...this.#queuesOf(namespace, name)]) {
      if (keep.has(queue.key)) continue;
      if (queue.size > 0) {
        this.log.info(
          `${queue.name} is gone from its Service: refusing its ${queue.size} held client(s)`,
        );
      }
      queue.refuseAll('service-changed');
      if (!queue.attached) this.#owner.forget(queue);
    }
  }

  /**
   * The hybrid is about to move `namespace/name` to the main proxier because its endpoints came:
   * the UDP datagrams buffered for it (`udpBufferDatagrams`) are dropped and counted, not replayed,
   * since the idling socket that would replay them closes with the switch and its sessions with it
   * (a replay would reach no backend). Held TCP clients are not affected: they outlive the switch.
   */
  switchingToMain(namespace: string, name: string): void {
    for (const gate of this.#gates.values()) {
      const sp = gate.servicePort;
      if (sp.namespace === namespace && sp.name === name) gate.discard();
    }
  }

  /** Running totals and the gauge, for metrics and status pages. */
  stats(): IdlerStats {
    const heldByServicePort: Record<string, number> = {};
    for (const queue of this.#queues.values()) {
      if (queue.size > 0) heldByServicePort[queue.name] = queue.size;
    }
    const { held, closed: _closed, ...rest } = this.counters;
    return {
      ...rest,
      heldNow: held,
      heldByServicePort,
      needPodsSent: this.needPods.sent,
      needPodsFailures: this.needPods.failures,
    };
  }

  /** Closes every held client and stops every timer; new clients are refused after. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#handOvers.clear();
    clearImmediate(this.#handOverTurn);
    this.#handOverTurn = undefined;
    for (const queue of [...this.#queues.values()]) queue.close();
    this.#queues.clear();
    this.#byService.clear();
    for (const gate of [...this.#gates.values()]) gate.close();
    this.#gates.clear();
  }

  /**
   * Queues the hand-over of a Service port. Held clients are dialled oldest first within a port,
   * ports in turn, with at most `handOverConcurrency` dials in flight across the proxy and at most
   * {@link HAND_OVER_BATCH} started per event-loop turn (so the loop sees connects complete between
   * batches); each dial that ends lets the next one start. Starting thousands of dials at once would
   * arm their 250 ms first-attempt timers before the loop could see a single connect complete, so
   * every first attempt would time out, and would need a descriptor per dial on top of the held
   * clients'.
   */
  #handOver(queue: HoldQueue): void {
    this.#handOvers.add(queue);
    this.#scheduleHandOver();
  }

  #scheduleHandOver(): void {
    if (this.#handOverTurn !== undefined || this.#handOvers.size === 0 || this.#closed) return;
    if (this.#dialsInFlight >= this.options.handOverConcurrency) return;
    this.#handOverTurn = setImmediate(this.#handOverBatch);
  }

  /** One hand-over dial ended (connected or not): room for the next. */
  readonly #dialEnded = (): void => {
    this.#dialsInFlight--;
    this.#scheduleHandOver();
  };

  readonly #handOverBatch = (): void => {
    this.#handOverTurn = undefined;
    const room = this.options.handOverConcurrency - this.#dialsInFlight;
    let budget = Math.min(HAND_OVER_BATCH, room);
    for (const queue of this.#handOvers) {
      if (budget <= 0) break;
      const dialled = queue.dialSome(budget, this.#dialEnded);
      this.#dialsInFlight += dialled;
      budget -= dialled;
      // Done, or stopped for want of endpoints (the next endpoints change queues it again).
      if (queue.size === 0 || budget > 0) this.#handOvers.delete(queue);
    }
    this.#scheduleHandOver();
  };

  #queuesOf(namespace: string, name: string): Iterable<HoldQueue> {
    return this.#byService.get(serviceKey(namespace, name)) ?? [];
  }

  #queue(context: ProxySocketContext): HoldQueue {
    const key = `${servicePortNameString(context.servicePort)}/TCP`;
    let queue = this.#queues.get(key);
    if (queue === undefined) {
      queue = new HoldQueue(this.#owner, key, context);
      this.#queues.set(key, queue);
      const sp = context.servicePort;
      const byKey = serviceKey(sp.namespace, sp.name);
      let set = this.#byService.get(byKey);
      if (set === undefined) {
        set = new Set();
        this.#byService.set(byKey, set);
      }
      set.add(queue);
    }
    return queue;
  }
}

/** "ns/name": the key of the per-Service index. */
function serviceKey(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}
