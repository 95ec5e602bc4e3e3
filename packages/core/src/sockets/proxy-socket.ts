import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import type { Addr, Protocol } from '../model/model.js';
import type { ServiceInfo } from '../model/service-info.js';
import type { ServicePortName } from '../model/service-port-name.js';

/**
 * One listening socket that proxies the traffic of one portal of one Service port. The Proxier makes
 * it through a {@link ProxySocketFactory}, calls `proxyLoop` once, and `close` when the portal goes
 * away. Integrators replace it (an idling socket that holds connections while a Service has no
 * endpoints, a socket that counts or limits) by passing their own factory to `newCustomProxier`.
 */
export interface ProxySocket {
  /** The bound address; when port 0 was asked for, the port the OS chose. */
  addr(): Addr;
  /** The port that was asked for (0 when the OS chose); what the Proxier releases to its allocator. */
  listenPort(): number;
  /**
   * Serves until the socket is closed or `info.isAlive()` turns false, then resolves. It must never
   * reject for a per-connection failure: those are logged and counted, and serving goes on.
   * Called at most once per socket.
   */
  proxyLoop(service: ServicePortName, info: ServiceInfo, lb: LoadBalancer): Promise<void>;
  /**
   * Stops accepting. TCP: established connections carry on to their natural end. UDP: every session
   * ends at once. Idempotent; resolves when the listening socket is closed.
   */
  close(): Promise<void>;
}

/**
 * Opens a socket for `protocol` bound to `ip` (all addresses when null) and `port` (0: the OS
 * chooses). Rejects with UnsupportedProtocolError for a protocol it does not serve, and with
 * SocketOpenError when the bind fails. The Proxier also uses it to hold node ports it claims.
 */
export type ProxySocketFactory = (
  protocol: Protocol,
  ip: string | null,
  port: number,
) => Promise<ProxySocket>;
