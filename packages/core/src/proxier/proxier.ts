import type { EndpointSliceHandler, EndpointsHandler, ServiceHandler } from '../config/handlers.js';
import type { AddressManager } from '../hooks/address-manager.js';
import type { ConntrackCleaner } from '../hooks/conntrack.js';
import type { EventRecorder } from '../hooks/event-recorder.js';
import type { PortalManager } from '../hooks/portal-manager.js';
import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import type { Logger } from '../logger.js';
import type { ServiceInfo } from '../model/service-info.js';
import type { ServicePortName } from '../model/service-port-name.js';
import type { ProxySocketOptions } from '../sockets/proxy-socket-options.js';
import type { DrainResult } from './proxier-context.js';

/**
 * How traffic reaches a proxy socket.
 * - `redirect`: one proxy socket per Service port on `listenIP` and a port from the allocator; a
 *   PortalManager sends Service-address traffic there (Linux userspace kube-proxy).
 * - `service-port-portal`: one real listener per Service port and address (Windows userspace
 *   kube-proxy); needs no NAT and no root.
 */
export type ProxyMode = 'redirect' | 'service-port-portal';

/** Options of {@link Proxier}; every one has a default. */
export interface ProxierOptions {
  /** Default: a new RoundRobinLoadBalancer. */
  loadBalancer?: LoadBalancer;
  /** Default: "service-port-portal", which works without NAT rules. */
  mode?: ProxyMode;
  /** Redirect mode: where proxy sockets listen. Default "0.0.0.0". */
  listenIP?: string;
  /** Redirect mode: proxy ports, "lo-hi" | "lo+n" | "n" | "" (OS-chosen, the default). */
  portRange?: string;
  /** Redirect mode: installs capture rules. Default: none installed. */
  portals?: PortalManager;
  /**
   * Where node ports are served: CIDRs, or the keywords "primary" (the node's primary IPs),
   * "localhost" or "all". Default: all addresses.
   */
  nodePortAddresses?: string[];
  /** The node's primary IPs, for the "primary" keyword. Default: detected from the interfaces. */
  nodeIPs?: string[];
  /** ServicePortPortal mode: adds Service IPs to an interface. Default: does nothing. */
  addresses?: AddressManager;
  /** The longest time between syncs. Default 30 000. */
  syncPeriodMs?: number;
  /** The shortest time between syncs (2 may run back to back). Default 1 000. */
  minSyncPeriodMs?: number;
  /** UDP session idle timeout. Default 10 000 (docs/differences.md says why not 250). */
  udpIdleTimeoutMs?: number;
  /** Options of the default proxy sockets; ignored by a custom factory. */
  proxySocket?: ProxySocketOptions;
  /** Default: none (the kernel one needs root and the conntrack tool). */
  conntrack?: ConntrackCleaner;
  /** Default: an in-process EmitterEventRecorder. */
  recorder?: EventRecorder;
  /** tslog-compatible; default silent. */
  logger?: Logger;
}

/**
 * Keeps the proxy sockets and portals in line with the Services it is told about. Service changes
 * are batched and applied by a sync; endpoint changes go straight to the load balancer.
 */
export interface Proxier extends ServiceHandler, EndpointsHandler, EndpointSliceHandler {
  /** Asks for a sync as soon as the rate limits allow. */
  sync(): void;
  /** Runs syncs until `signal` aborts (or `shutdown`); resolves then. */
  syncLoop(signal?: AbortSignal): Promise<void>;
  /** The info of a proxied Service port; in ServicePortPortal mode, of its listener on `portalIP`. */
  getServiceInfo(svcPort: ServicePortName, portalIP?: string): ServiceInfo | undefined;
  /** Every proxied Service port's info (one per portal in ServicePortPortal mode). */
  serviceInfos(): ServiceInfo[];
  /** True once Services and endpoints have both synced and a first sync has run. */
  isInitialized(): boolean;
  /** How many Services have a change waiting for a sync: what a status page or a test waits on. */
  pendingChanges(): number;
  /** The capture mode this Proxier runs: what an embedder's status page or health check reports. */
  readonly mode: ProxyMode;
  /**
   * The first half of a graceful stop: no sync runs again, every proxy socket stops accepting, and
   * the promise resolves when every connection they carry (held ones and UDP sessions included)
   * has ended, or once `deadlineMs` has passed, with what is still open. Portals and ports stay
   * until `shutdown`. Idempotent: later calls get the first call's result.
   */
  drain(deadlineMs: number): Promise<DrainResult>;
  /** Stops every proxy socket, closes portals, releases ports; established TCP connections carry on. */
  shutdown(): Promise<void>;
}
