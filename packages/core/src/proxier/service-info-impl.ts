import type { ServiceInfo } from '../model/service-info.js';
import type { ProxySocket } from '../sockets/proxy-socket.js';

/** The {@link ServiceInfo} members a {@link ServiceInfoImpl} makes itself rather than being given. */
type OwnMembers = 'proxyPort' | 'activeClients' | 'isAlive' | 'isStarted' | 'isFinished';

/**
 * What a {@link ServiceInfoImpl} is made from: every {@link ServiceInfo} field the Proxier decides,
 * derived from the interface so that a new field is declared once and every caller must supply it,
 * plus the socket (`proxyPort` is read from it; the sessions map and the lifecycle start empty).
 */
export type ServiceInfoInit = Omit<ServiceInfo, OwnMembers> & {
  /** The socket that serves this portal. */
  readonly socket: ProxySocket;
};

/** What most Services have as external and load-balancer IPs: one array for all of them. */
const NO_IPS: readonly string[] = Object.freeze([]);

/** A frozen copy of `ips`; the shared empty one when there are none (64 bytes per listener saved). */
function frozenCopy(ips: readonly string[]): readonly string[] {
  return ips.length === 0 ? NO_IPS : Object.freeze([...ips]);
}

/**
 * The Proxier's {@link ServiceInfo}: read-only to everyone else, with the lifecycle switches the
 * Proxier flips in a fixed order (alive at creation; started once its portal is open and the load
 * balancer knows the Service port; not alive, then finished once its socket is closed). Tests poll
 * `isStarted` / `isFinished` to wait for a sync to have taken effect.
 */
export class ServiceInfoImpl implements ServiceInfo {
  // Typed through ServiceInfo, where each field is declared and documented once.
  readonly protocol: ServiceInfo['protocol'];
  readonly portal: ServiceInfo['portal'];
  readonly proxyPort: ServiceInfo['proxyPort'];
  readonly nodePort: ServiceInfo['nodePort'];
  readonly externalIPs: ServiceInfo['externalIPs'];
  readonly loadBalancerIPs: ServiceInfo['loadBalancerIPs'];
  readonly sessionAffinityType: ServiceInfo['sessionAffinityType'];
  readonly udpIdleTimeoutMs: ServiceInfo['udpIdleTimeoutMs'];
  /** The socket that serves this portal; the Proxier closes it when the info is replaced. */
  readonly socket: ProxySocket;
  #serviceRef: ServiceInfo['serviceRef'];
  #stickyMaxAgeSeconds: ServiceInfo['stickyMaxAgeSeconds'];
  #activeClients: ServiceInfo['activeClients'] | undefined;
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
    this.externalIPs = frozenCopy(init.externalIPs);
    this.loadBalancerIPs = frozenCopy(init.loadBalancerIPs);
    this.sessionAffinityType = init.sessionAffinityType;
    this.#stickyMaxAgeSeconds = init.stickyMaxAgeSeconds;
    this.udpIdleTimeoutMs = init.udpIdleTimeoutMs;
  }

  /** The Service being proxied. It follows a re-created Service (new uid) without a new socket. */
  get serviceRef(): ServiceInfo['serviceRef'] {
    return this.#serviceRef;
  }

  /**
   * The UDP sessions by client. Made on first read: a TCP portal never reads it, and an empty Map
   * is about 180 bytes, 1.8 MB at 10 000 listeners.
   */
  get activeClients(): ServiceInfo['activeClients'] {
    this.#activeClients ??= new Map<string, unknown>();
    return this.#activeClients;
  }

  /** The ClientIP affinity TTL; a change of the TTL alone updates it in place (no new socket). */
  get stickyMaxAgeSeconds(): ServiceInfo['stickyMaxAgeSeconds'] {
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
  setServiceRef(ref: ServiceInfo['serviceRef']): void {
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
