import type { EndpointsHandler } from '../config/handlers.js';
import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import type { Logger } from '../logger.js';
import type { Endpoints } from '../model/model.js';
import { DEFAULT_NAMESPACE, namespacedKey } from '../model/object-key.js';
import type { ServicePortName } from '../model/service-port-name.js';
import type { EndpointsChangedListener } from '../sockets/proxy-socket.js';

interface Subscription {
  readonly servicePort: ServicePortName;
  readonly listener: EndpointsChangedListener;
}

/**
 * The push side of `ProxySocketContext.onEndpointsChanged`: the load balancer is fed through
 * {@link EndpointsNotifier.wrap}, and after each Endpoints object (or merged set of slices) has
 * reached it, the subscribers of that Service's ports hear of it. Costs nothing for a Service with
 * no subscriber (one map look-up), so the default sockets, which never subscribe, pay nothing.
 */
export class EndpointsNotifier {
  readonly #byService = new Map<string, Set<Subscription>>();
  readonly #lb: LoadBalancer;
  readonly #log: Logger;

  constructor(lb: LoadBalancer, log: Logger) {
    this.#lb = lb;
    this.#log = log;
  }

  /** Subscribes `listener` to `servicePort`'s endpoints until the returned function is called. */
  subscribe(
    servicePort: ServicePortName,
    listener: EndpointsChangedListener,
    signal?: AbortSignal,
  ): () => void {
    const key = namespacedKey(servicePort.namespace, servicePort.name);
    const subscription: Subscription = { servicePort, listener };
    let set = this.#byService.get(key);
    if (set === undefined) {
      set = new Set();
      this.#byService.set(key, set);
    }
    set.add(subscription);
    const unsubscribe = (): void => {
      const current = this.#byService.get(key);
      if (current === undefined) return;
      current.delete(subscription);
      if (current.size === 0) this.#byService.delete(key);
      signal?.removeEventListener('abort', unsubscribe);
    };
    if (signal?.aborted) unsubscribe();
    else signal?.addEventListener('abort', unsubscribe, { once: true });
    return unsubscribe;
  }

  /** A handler that feeds `target` (the load balancer) and then tells the subscribers. */
  wrap(target: EndpointsHandler): EndpointsHandler {
    return {
      onEndpointsAdd: (endpoints) => {
        target.onEndpointsAdd(endpoints);
        this.#changed(endpoints);
      },
      onEndpointsUpdate: (old, endpoints) => {
        target.onEndpointsUpdate(old, endpoints);
        this.#changed(endpoints);
      },
      onEndpointsDelete: (endpoints) => {
        target.onEndpointsDelete(endpoints);
        this.#changed(endpoints);
      },
      onEndpointsSynced: () => target.onEndpointsSynced(),
    };
  }

  #changed(endpoints: Endpoints): void {
    if (this.#byService.size === 0) return;
    const namespace = endpoints.metadata.namespace || DEFAULT_NAMESPACE;
    const set = this.#byService.get(namespacedKey(namespace, endpoints.metadata.name));
    if (set === undefined) return;
    for (const { servicePort, listener } of [...set]) {
      try {
        listener({ servicePort, hasEndpoints: this.#lb.serviceHasEndpoints(servicePort) });
      } catch (error) {
        this.#log.error('an endpoints-changed listener failed', error);
      }
    }
  }
}
