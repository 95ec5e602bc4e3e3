/**
 * A socket of your own, on the public surface: most custom sockets are an accept policy on the
 * default TCP socket. `CountingPolicy` counts every new client of one listener and refuses those
 * beyond a rate (connections per second); the default socket keeps doing the proxying, closes a
 * refused client, and publishes the refusal on the `userspace-proxy:refused` channel (reason
 * `policy`). No load balancer is wrapped and nothing is copied from the default socket.
 *
 * The same shape holds clients while a Service has no endpoints (`holdUntilEndpoints` below): a
 * policy that answers `hold`, keeps the connections, and calls `proxy()` on them when the socket's
 * context says the endpoints arrived — the heart of an idling socket.
 */
import {
  type AcceptedConnection,
  type AcceptPolicy,
  type AcceptVerdict,
  createProxySocketFactory,
  newCustomProxier,
  type Proxier,
  type ProxierOptions,
  type ProxySocketContext,
} from '@userspace-proxy/core';

/** Options of {@link CountingPolicy}. */
export interface RateLimitOptions {
  /** New connections allowed per second on one listener. */
  maxNewPerSecond: number;
  /** Clock in ms; injected so a test can move time. Default `Date.now`. */
  now?: () => number;
}

/** What one listener's {@link CountingPolicy} has seen. */
export interface ConnectionCounts {
  accepted: number;
  refused: number;
  /** Accepted and not yet closed. */
  open: number;
}

/** Counts new clients and refuses those beyond `maxNewPerSecond` in the current second. */
export class CountingPolicy implements AcceptPolicy {
  readonly counts: ConnectionCounts = { accepted: 0, refused: 0, open: 0 };
  readonly #max: number;
  readonly #now: () => number;
  readonly #onClose: () => void;
  #second = Number.NEGATIVE_INFINITY;
  #inSecond = 0;

  /** `onClose` runs when the socket closes (the factory forgets the policy then). */
  constructor(options: RateLimitOptions, onClose: () => void = () => {}) {
    this.#max = options.maxNewPerSecond;
    this.#now = options.now ?? Date.now;
    this.#onClose = onClose;
  }

  accept(connection: AcceptedConnection): AcceptVerdict {
    const second = Math.floor(this.#now() / 1000);
    if (second !== this.#second) {
      this.#second = second;
      this.#inSecond = 0;
    }
    if (this.#inSecond >= this.#max) {
      this.counts.refused++;
      return 'refuse';
    }
    this.#inSecond++;
    this.counts.accepted++;
    this.counts.open++;
    connection.onClose(() => this.counts.open--);
    return 'proxy';
  }

  close(): void {
    this.#onClose();
  }
}

/**
 * A Proxier whose TCP listeners each get a {@link CountingPolicy}; `policies` lists those of the
 * listeners open now.
 */
export async function newCountingProxier(
  options: ProxierOptions,
  limits: RateLimitOptions,
): Promise<{ proxier: Proxier; policies: CountingPolicy[] }> {
  const policies: CountingPolicy[] = [];
  const factory = createProxySocketFactory({
    acceptPolicy: () => {
      const policy: CountingPolicy = new CountingPolicy(limits, () => {
        policies.splice(policies.indexOf(policy), 1);
      });
      policies.push(policy);
      return policy;
    },
  });
  return { proxier: await newCustomProxier(options, factory), policies };
}

/**
 * Holds every client while the Service port has no endpoints, and hands them over, oldest first,
 * as soon as the context says endpoints arrived. A sketch of an idling socket: the idler package
 * adds the bounds (per port, global, a hold timeout), NeedPods events and metrics.
 */
export function holdUntilEndpoints(context: ProxySocketContext): AcceptPolicy {
  const held: AcceptedConnection[] = [];
  const off = context.onEndpointsChanged(({ hasEndpoints }) => {
    if (hasEndpoints) for (const connection of held.splice(0)) connection.proxy();
  });
  return {
    accept(connection) {
      if (context.loadBalancer.serviceHasEndpoints(context.servicePort)) return 'proxy';
      held.push(connection);
      connection.onClose(() => {
        const i = held.indexOf(connection);
        if (i >= 0) held.splice(i, 1);
      });
      return 'hold';
    },
    close() {
      off();
      for (const connection of held.splice(0)) connection.refuse('socket-closed');
    },
  };
}
