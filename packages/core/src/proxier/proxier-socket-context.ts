import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import type { Logger } from '../logger.js';
import type { Protocol, Service } from '../model/model.js';
import type { ServicePortName } from '../model/service-port-name.js';
import type { EndpointsChangedListener, ProxySocketContext } from '../sockets/proxy-socket.js';
import type { EndpointsNotifier } from './endpoints-notifier.js';

/** What a {@link ProxierSocketContext} is made from. */
export interface ProxierSocketContextInit {
  protocol: Protocol;
  ip: string | null;
  port: number;
  servicePort: ServicePortName;
  service: Service;
  logger: Logger;
  loadBalancer: LoadBalancer;
  notifier: EndpointsNotifier;
  allowedSources?: readonly string[] | undefined;
}

/**
 * The context the Proxier hands each proxy socket it opens: one per listener, so it is made to be
 * small. Its `signal` (an `AbortController` with its `EventTarget` and two Maps, about 700 bytes)
 * is made on first read, since the default sockets never read it: a context that was aborted before
 * anyone asked returns a signal that is already aborted. A subscription to `onEndpointsChanged` does
 * not make it either (the native sockets subscribe on every listener): the context keeps the
 * unsubscribe functions and calls them in `abort`. `signal` and `onEndpointsChanged` are on
 * the prototype, not own properties: a context derived by spreading (`{ ...context }`) loses them,
 * so derive one with `Object.create(context)` or by naming the members (docs/api.md).
 */
export class ProxierSocketContext implements ProxySocketContext {
  readonly protocol: Protocol;
  readonly ip: string | null;
  readonly port: number;
  readonly servicePort: ServicePortName;
  readonly service: Service;
  readonly logger: Logger;
  readonly loadBalancer: LoadBalancer;
  declare readonly allowedSources?: readonly string[];
  readonly #notifier: EndpointsNotifier;
  #controller: AbortController | undefined;
  /** The `onEndpointsChanged` subscriptions, ended by {@link abort} (made on first subscribe). */
  #unsubscribes: (() => void)[] | undefined;
  #aborted = false;

  constructor(init: ProxierSocketContextInit) {
    this.protocol = init.protocol;
    this.ip = init.ip;
    this.port = init.port;
    this.servicePort = init.servicePort;
    this.service = init.service;
    this.logger = init.logger;
    this.loadBalancer = init.loadBalancer;
    this.#notifier = init.notifier;
    if (init.allowedSources !== undefined && init.allowedSources.length > 0) {
      (this as { allowedSources?: readonly string[] }).allowedSources = init.allowedSources;
    }
  }

  /** Aborted when the Proxier no longer wants the socket, right before `close`. */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#aborted) this.#controller.abort();
    }
    return this.#controller.signal;
  }

  /** ProxySocketContext: subscribes until the returned function is called or `signal` aborts. */
  onEndpointsChanged(listener: EndpointsChangedListener): () => void {
    if (this.#aborted) return () => {};
    const unsubscribe = this.#notifier.subscribe(this.servicePort, listener);
    if (this.#unsubscribes === undefined) this.#unsubscribes = [unsubscribe];
    else this.#unsubscribes.push(unsubscribe);
    return unsubscribe;
  }

  /**
   * Aborts `signal` and ends the endpoint subscriptions (idempotent); the Proxier calls it right
   * before closing the socket.
   */
  abort(): void {
    this.#aborted = true;
    this.#controller?.abort();
    const unsubscribes = this.#unsubscribes;
    this.#unsubscribes = undefined;
    if (unsubscribes !== undefined) for (const unsubscribe of unsubscribes) unsubscribe();
  }
}
