import type { AffinityType } from '../load-balancing/load-balancer.js';
import type { ObjectReference, Protocol } from './model.js';

/** The address a client uses to reach a Service port. */
export interface PortalAddress {
  /** The Service IP (a node-port listener's address, "" for every address). */
  ip: string;
  /** The Service port (the node port for a node-port listener). */
  port: number;
  /** True for a Service external IP, whose rules also match locally originated traffic. */
  isExternal: boolean;
}

/**
 * What the Proxier knows about one proxied Service port (redirect mode) or one Service port on one
 * address (ServicePortPortal mode). A new ServiceInfo replaces the old one whenever the Service's
 * configuration for that port changes; the old one is then "finished".
 */
export interface ServiceInfo {
  /** The Service being proxied, for events. */
  readonly serviceRef: ObjectReference;
  /** The Service port's protocol. */
  readonly protocol: Protocol;
  /** What clients connect to: in redirect mode the cluster IP and port, in portal mode this listener's. */
  readonly portal: PortalAddress;
  /** The bound port of the proxy socket. */
  readonly proxyPort: number;
  /** The Service's node port, 0 when it has none. */
  readonly nodePort: number;
  /** The Service's external IPs (`spec.externalIPs`). */
  readonly externalIPs: readonly string[];
  /** The Service's load-balancer ingress IPs; hostname-only entries are left out. */
  readonly loadBalancerIPs: readonly string[];
  /** "ClientIP" or "None" (an unset affinity is "None"). */
  readonly sessionAffinityType: AffinityType;
  /** The ClientIP affinity TTL, 0 when affinity is off. */
  readonly stickyMaxAgeSeconds: number;
  /** How long a UDP session lives with no datagram either way. */
  readonly udpIdleTimeoutMs: number;
  /**
   * Live UDP sessions keyed by client "ip:port". The UDP proxy socket owns the entries; everyone else
   * only reads them.
   */
  readonly activeClients: Map<string, unknown>;
  /** False once the Proxier has stopped this proxy; proxy loops end when they see it. */
  isAlive(): boolean;
  /** True once the portal is open and the load balancer knows the Service port. */
  isStarted(): boolean;
  /** True once this info has been replaced or removed and its socket closed. */
  isFinished(): boolean;
}
