import type { AffinityType } from '../load-balancing/load-balancer.js';
import type { ObjectReference, Protocol } from '../model/model.js';
import type { PortalAddress, ServiceInfo } from '../model/service-info.js';
import type { ProxySocket } from '../sockets/proxy-socket.js';

/** What a {@link ServiceInfoImpl} is made from. */
export interface ServiceInfoInit {
  serviceRef: ObjectReference;
  protocol: Protocol;
  portal: PortalAddress;
  socket: ProxySocket;
  nodePort: number;
  externalIPs: readonly string[];
  loadBalancerIPs: readonly string[];
  sessionAffinityType: AffinityType;
  stickyMaxAgeSeconds: number;
  udpIdleTimeoutMs: number;
}

/**
 * The Proxier's {@link ServiceInfo}: read-only to everyone else, with the lifecycle switches the
 * Proxier flips in a fixed order (alive at creation; started once its portal is open and the load
 * balancer knows the Service port; not alive, then finished once its socket is closed). Tests poll
 * `isStarted` / `isFinished` to wait for a sync to have taken effect.
 */
export class ServiceInfoImpl implements ServiceInfo {
  readonly protocol: Protocol;
  readonly portal: PortalAddress;
  readonly proxyPort: number;
  readonly nodePort: number;
  readonly externalIPs: readonly string[];
  readonly loadBalancerIPs: readonly string[];
  readonly sessionAffinityType: AffinityType;
  readonly udpIdleTimeoutMs: number;
  readonly activeClients = new Map<string, unknown>();
  /** The socket that serves this portal; the Proxier closes it when the info is replaced. */
  readonly socket: ProxySocket;
  #serviceRef: ObjectReference;
  #stickyMaxAgeSeconds: number;
  #alive = true;
  #started = false;
  #finished = false;

  constructor(init: ServiceInfoInit) {
    this.#serviceRef = init.serviceRef;
    this.protocol = init.protocol;
    this.portal = Object.freeze({ ...init.portal });
    this.socket = init.socket;
    this.proxyPort = init.socket.addr().port;
    this.nodePort = init.nodePort;
    this.externalIPs = Object.freeze([...init.externalIPs]);
    this.loadBalancerIPs = Object.freeze([...init.loadBalancerIPs]);
    this.sessionAffinityType = init.sessionAffinityType;
    this.#stickyMaxAgeSeconds = init.stickyMaxAgeSeconds;
    this.udpIdleTimeoutMs = init.udpIdleTimeoutMs;
  }

  /** The Service being proxied. It follows a re-created Service (new uid) without a new socket. */
  get serviceRef(): ObjectReference {
    return this.#serviceRef;
  }

  /** The ClientIP affinity TTL; a change of the TTL alone updates it in place (no new socket). */
  get stickyMaxAgeSeconds(): number {
    return this.#stickyMaxAgeSeconds;
  }

  isAlive(): boolean {
    return this.#alive;
  }

  isStarted(): boolean {
    return this.#started;
  }

  isFinished(): boolean {
    return this.#finished;
  }

  /** Called by the Proxier when only the Service's identity changed (deleted and re-added). */
  setServiceRef(ref: ObjectReference): void {
    this.#serviceRef = ref;
  }

  /** Called by the Proxier when only the affinity TTL changed. */
  setStickyMaxAgeSeconds(seconds: number): void {
    this.#stickyMaxAgeSeconds = seconds;
  }

  /** Called once the portal is open and the load balancer knows the Service port. */
  setStarted(): void {
    if (this.#alive) this.#started = true;
  }

  /** Marks the proxy as stopping, so its proxy loop ends; called just before the socket closes. */
  stop(): void {
    this.#alive = false;
  }

  /** Called once the socket is closed: the info is done for good. */
  setFinished(): void {
    this.#alive = false;
    this.#finished = true;
  }
}
