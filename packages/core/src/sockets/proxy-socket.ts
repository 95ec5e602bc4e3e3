import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import type { Logger } from '../logger.js';
import type { Addr, Protocol, Service } from '../model/model.js';
import type { ServiceInfo } from '../model/service-info.js';
import type { ServicePortName } from '../model/service-port-name.js';

/**
 * One listening socket that proxies the traffic of one portal of one Service port. The Proxier makes
 * it through a {@link ProxySocketFactory}, calls `proxyLoop` once, and `close` when the portal goes
 * away. Integrators replace it (an idling socket that holds connections while a Service has no
 * endpoints, a socket that counts or limits, an SCTP socket) by passing their own factory to
 * `newCustomProxier`; most of them only need an accept policy on the default TCP socket.
 */
export interface ProxySocket {
  /** The bound address; when port 0 was asked for, the port the OS chose. */
  addr(): Addr;
  /** The port that was asked for (0 when the OS chose); what the Proxier releases to its allocator. */
  listenPort(): number;
  /**
   * Serves until the socket is closed or `info.isAlive()` turns false, then resolves. It must never
   * reject for a per-connection failure: those are logged and counted, and serving goes on. Called
   * at most once per socket, after the factory resolved; `info.proxyPort` is `addr().port`. The rest
   * of what a socket needs (load balancer, logger, signal, endpoint changes) came with its context.
   */
  proxyLoop(info: ServiceInfo): Promise<void>;
  /**
   * Stops accepting. TCP: established connections carry on to their natural end. UDP: every session
   * ends at once. Idempotent; resolves when the listening socket is closed.
   */
  close(): Promise<void>;
  /**
   * Connections (or sessions, or associations) this socket still carries, held ones included. Read
   * by `Proxier.drain` and by status pages. Optional: a socket without it counts as empty once
   * closed.
   */
  activeConnections?(): number;
  /**
   * Resolves once `activeConnections()` is 0 after `close`, so a drain waits on a promise instead of
   * polling. Optional, with `activeConnections`.
   */
  idle?(): Promise<void>;
  /**
   * Resets (TCP RST) every connection this socket still carries, dialling and held ones included,
   * and ends every UDP session. `Proxier.drain` calls it on the sockets left when its deadline
   * passes, so a stream cut by the shutdown looks cut to its client, not complete as a FIN would
   * make it. Optional: a socket without it keeps its connections until the process exits.
   */
  abortConnections?(): void;
}

/** What a socket hears when the endpoints of its Service port change. */
export interface EndpointsChange {
  /** The Service port whose endpoints changed. */
  readonly servicePort: ServicePortName;
  /** `loadBalancer.serviceHasEndpoints(servicePort)` right after the change was applied. */
  readonly hasEndpoints: boolean;
}

/** A subscriber of {@link ProxySocketContext.onEndpointsChanged}. */
export type EndpointsChangedListener = (change: EndpointsChange) => void;

/**
 * Everything a proxy socket is made with: where to listen, what it serves, and the capabilities it
 * may use. It is a capability object (as grpc-js hands a load balancer its helper): a socket never
 * reaches into the Proxier, and a test or an embedder can build one with `createSocketContext` from
 * `@userspace-proxy/core/sockets` to run a socket on its own.
 */
export interface ProxySocketContext {
  /** The protocol to serve, upper case. A factory declines one it does not serve. */
  readonly protocol: Protocol;
  /** The address to bind; null is every address. */
  readonly ip: string | null;
  /** The port to bind; 0 lets the OS choose (redirect mode with no port range). */
  readonly port: number;
  /** The Service port this socket serves (with its protocol). */
  readonly servicePort: ServicePortName;
  /**
   * The Service as validated when the socket was opened, annotations included (an idler reads
   * `idling.alpha.openshift.io/*` here; the default TCP socket reads
   * `userspace-proxy.io/proxy-protocol`, whose change re-creates the socket). A change that needs no new socket (the uid, the affinity
   * TTL, an annotation) does not update it; read the Proxier's Service handlers for those.
   */
  readonly service: Service;
  /** A logger named after the Service port, for everything this socket reports. */
  readonly logger: Logger;
  /**
   * Aborted when the Proxier no longer wants this socket (its portal went away, the Proxier shut
   * down), right before `close`. Pass it to dials and timers so nothing outlives the socket.
   */
  readonly signal: AbortSignal;
  /** Picks the endpoint of each new connection or session (`nextEndpoint`). */
  readonly loadBalancer: LoadBalancer;
  /**
   * Calls `listener` after every change of this Service port's endpoints has reached the load
   * balancer (push, no polling), until the returned function is called or `signal` aborts. A
   * listener that throws is logged and kept. Listeners run synchronously in the Proxier's endpoint
   * handler: do little there (mark, schedule), never block.
   */
  onEndpointsChanged(listener: EndpointsChangedListener): () => void;
  /**
   * CIDRs a client's address must be in (`spec.loadBalancerSourceRanges` on a load-balancer IP's
   * listener, and in redirect mode on the socket the load-balancer IPs' rules send to); absent or
   * empty, every client is allowed. The default sockets close (TCP) or drop
   * (UDP) anyone else at accept, counted on `refused` as `source-range`. A custom socket that
   * ignores it serves everyone.
   */
  readonly allowedSources?: readonly string[];
}

/**
 * Opens the socket a context describes and resolves once it is bound, so `addr()` is final. Rejects
 * with UnsupportedProtocolError for a protocol it does not serve (the default factory does so for
 * SCTP, naming `@userspace-proxy/sctp`), and with SocketOpenError when the bind fails.
 */
export type ProxySocketFactory = (context: ProxySocketContext) => Promise<ProxySocket>;
