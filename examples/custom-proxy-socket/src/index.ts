/**
 * A ProxySocket of your own, plugged in with `newCustomProxier`. `CountingProxySocket` wraps the
 * default socket (which keeps doing the proxying) and puts a gate in front of the load balancer it
 * is given: every new client connection (TCP) or session (UDP) asks the load balancer for an endpoint
 * exactly once, so the gate sees each one. It counts them and refuses new clients beyond a rate
 * (connections per second, per listener); a refused client is closed by the default socket and
 * counted on the `userspace-proxy:refused` channel like any other refusal.
 *
 * Every other method is passed through, so the wrapper inherits the default socket's behaviour:
 * established connections survive `close()`, UDP sessions end, and so on.
 */
import {
  type Addr,
  type AffinityType,
  type Endpoints,
  LimitReachedError,
  type LoadBalancer,
  newCustomProxier,
  newProxySocket,
  type Proxier,
  type ProxierOptions,
  type ProxySocket,
  type ProxySocketFactory,
  type ServiceInfo,
  type ServicePortName,
} from '@userspace-proxy/core';

/** Options of {@link CountingProxySocket}. */
export interface CountingOptions {
  /** New connections (or UDP sessions) allowed per second on one listener. */
  maxNewPerSecond: number;
  /** Clock in ms; injected so a test can move time. Default `Date.now`. */
  now?: () => number;
}

/** What one {@link CountingProxySocket} has seen. */
export interface ConnectionCounts {
  accepted: number;
  refused: number;
}

/** Wraps a ProxySocket, counting new clients and limiting how many arrive per second. */
export class CountingProxySocket implements ProxySocket {
  readonly counts: ConnectionCounts = { accepted: 0, refused: 0 };
  readonly #inner: ProxySocket;
  readonly #max: number;
  readonly #now: () => number;
  #windowStart = Number.NEGATIVE_INFINITY;
  #inWindow = 0;

  readonly #onClose: ((socket: CountingProxySocket) => void) | undefined;

  /** `onClose` is told once the socket has closed (the factory forgets it then). */
  constructor(
    inner: ProxySocket,
    options: CountingOptions,
    onClose?: (socket: CountingProxySocket) => void,
  ) {
    this.#inner = inner;
    this.#max = options.maxNewPerSecond;
    this.#now = options.now ?? Date.now;
    this.#onClose = onClose;
  }

  addr(): Addr {
    return this.#inner.addr();
  }

  listenPort(): number {
    return this.#inner.listenPort();
  }

  /** Serves through the default socket, with the gate in front of the load balancer. */
  proxyLoop(service: ServicePortName, info: ServiceInfo, lb: LoadBalancer): Promise<void> {
    const gated = new GatedLoadBalancer(lb, this.#max, () => this.#admit());
    return this.#inner.proxyLoop(service, info, gated);
  }

  async close(): Promise<void> {
    try {
      await this.#inner.close();
    } finally {
      this.#onClose?.(this);
    }
  }

  /** One new client: true if it may go on. A fixed one-second window keeps the example short. */
  #admit(): boolean {
    const now = this.#now();
    if (now - this.#windowStart >= 1000) {
      this.#windowStart = now;
      this.#inWindow = 0;
    }
    if (this.#inWindow >= this.#max) {
      this.counts.refused++;
      return false;
    }
    this.#inWindow++;
    this.counts.accepted++;
    return true;
  }
}

/** A LoadBalancer that asks `admit` before the first endpoint of each new client. */
class GatedLoadBalancer implements LoadBalancer {
  readonly #lb: LoadBalancer;
  readonly #limit: number;
  readonly #admit: () => boolean;

  constructor(lb: LoadBalancer, limit: number, admit: () => boolean) {
    this.#lb = lb;
    this.#limit = limit;
    this.#admit = admit;
  }

  nextEndpoint(svcPort: ServicePortName, srcAddr: Addr | null, reset: boolean): string {
    // A retry after a failed dial (reset true) belongs to a client already admitted.
    if (!reset && !this.#admit()) {
      throw new LimitReachedError('new connections per second', this.#limit);
    }
    return this.#lb.nextEndpoint(svcPort, srcAddr, reset);
  }

  newService(svcPort: ServicePortName, affinityType: AffinityType, ttlSeconds: number): void {
    this.#lb.newService(svcPort, affinityType, ttlSeconds);
  }

  deleteService(svcPort: ServicePortName): void {
    this.#lb.deleteService(svcPort);
  }

  cleanupStaleStickySessions(svcPort: ServicePortName): void {
    this.#lb.cleanupStaleStickySessions(svcPort);
  }

  serviceHasEndpoints(svcPort: ServicePortName): boolean {
    return this.#lb.serviceHasEndpoints(svcPort);
  }

  onEndpointsAdd(endpoints: Endpoints): void {
    this.#lb.onEndpointsAdd(endpoints);
  }

  onEndpointsUpdate(oldEndpoints: Endpoints, endpoints: Endpoints): void {
    this.#lb.onEndpointsUpdate(oldEndpoints, endpoints);
  }

  onEndpointsDelete(endpoints: Endpoints): void {
    this.#lb.onEndpointsDelete(endpoints);
  }

  onEndpointsSynced(): void {
    this.#lb.onEndpointsSynced();
  }
}

/**
 * A socket factory that wraps every socket of `inner` (default: the library's TCP/UDP sockets) in a
 * {@link CountingProxySocket}, and keeps the open ones in `sockets` so a program can report their
 * counts. A socket leaves the list when it closes, so Services that come and go do not grow it.
 */
export function countingSocketFactory(
  options: CountingOptions,
  inner: ProxySocketFactory = newProxySocket,
): { factory: ProxySocketFactory; sockets: CountingProxySocket[] } {
  const sockets: CountingProxySocket[] = [];
  const forget = (socket: CountingProxySocket) => {
    const i = sockets.indexOf(socket);
    if (i >= 0) sockets.splice(i, 1);
  };
  const factory: ProxySocketFactory = async (protocol, ip, port) => {
    const socket = new CountingProxySocket(await inner(protocol, ip, port), options, forget);
    sockets.push(socket);
    return socket;
  };
  return { factory, sockets };
}

/** A Proxier whose every listener counts and rate-limits new clients. */
export async function newCountingProxier(
  proxierOptions: ProxierOptions,
  counting: CountingOptions,
): Promise<{ proxier: Proxier; sockets: CountingProxySocket[] }> {
  const { factory, sockets } = countingSocketFactory(counting);
  const proxier = await newCustomProxier(proxierOptions, factory);
  return { proxier, sockets };
}
