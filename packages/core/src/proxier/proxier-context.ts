import { SocketOpenError } from '../errors.js';
import type { EventRecorder, EventType } from '../hooks/event-recorder.js';
import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import type { Logger } from '../logger.js';
import { deferredComponentLogger } from '../logger.js';
import type { ObjectReference } from '../model/model.js';
import type { PortalAddress } from '../model/service-info.js';
import type { ProxySocket, ProxySocketFactory } from '../sockets/proxy-socket.js';
import type { EndpointsNotifier } from './endpoints-notifier.js';
import { localAddresses, type NetworkInterfacesFn } from './node-port-addresses.js';
import type { NodePortClaims } from './node-port-claims.js';
import { ProxierSocketContext } from './proxier-socket-context.js';
import { ServiceInfoImpl } from './service-info-impl.js';
import type { ServicePortSpec } from './service-port-spec.js';

/** The event reasons the Proxier records; stable, so that operators can filter on them. */
export const PROXIER_EVENT_REASONS = {
  /** Another Service port holds the address, port and protocol (PortConflictError). */
  portConflict: 'PortConflict',
  /** A capture rule (redirect mode) or a Service address (portal mode) could not be set up. */
  portalFailed: 'PortalFailed',
  /** A proxy socket or listener could not be opened (SocketOpenError). */
  socketOpenFailed: 'SocketOpenFailed',
  /** The proxy port range is exhausted (PortAllocationError). */
  portAllocationFailed: 'PortAllocationFailed',
} as const;

/** What both modes share: the dependencies of the Proxier and the socket helpers built on them. */
export interface ProxierContextInit {
  log: Logger;
  lb: LoadBalancer;
  makeProxySocket: ProxySocketFactory;
  claims: NodePortClaims;
  recorder: EventRecorder;
  udpIdleTimeoutMs: number;
  networkInterfaces: NetworkInterfacesFn;
  /** Node ports are served on these addresses; null is every address. */
  nodePortAddresses: readonly (string | null)[];
  /** Where sockets subscribe to their Service port's endpoint changes. */
  notifier: EndpointsNotifier;
}

/** What `Proxier.drain` resolves with. */
export interface DrainResult {
  /** Connections (held ones and UDP sessions included) still open when the drain ended. */
  remaining: number;
  /** True when the deadline passed before every connection had ended. */
  timedOut: boolean;
}

/**
 * The services both capture modes use: opening and closing one proxy socket with its ServiceInfo,
 * and recording events without ever letting a faulty recorder break a sync.
 */
export class ProxierContext {
  readonly log: Logger;
  readonly lb: LoadBalancer;
  readonly claims: NodePortClaims;
  readonly nodePortAddresses: readonly (string | null)[];
  readonly networkInterfaces: NetworkInterfacesFn;
  readonly #makeProxySocket: ProxySocketFactory;
  readonly #recorder: EventRecorder;
  readonly #udpIdleTimeoutMs: number;
  /** Where sockets subscribe to endpoint changes; the Proxier feeds the load balancer through it. */
  readonly notifier: EndpointsNotifier;
  /** Each open proxy's socket context: its signal is aborted right before its socket closes. */
  readonly #contexts = new Map<ServiceInfoImpl, ProxierSocketContext>();
  /** Sockets that are open, or closed but still carrying connections: what a drain waits for. */
  readonly #live = new Set<ProxySocket>();
  /**
   * Set by {@link stopAccepting}: every socket is being closed for a graceful stop, so a proxy loop
   * that ends now ends as expected, not "while serving" (the ServiceInfos stay alive meanwhile, as
   * their established connections still drain).
   */
  #stopping = false;

  constructor(init: ProxierContextInit) {
    this.log = init.log;
    this.lb = init.lb;
    this.claims = init.claims;
    this.nodePortAddresses = init.nodePortAddresses;
    this.networkInterfaces = init.networkInterfaces;
    this.#makeProxySocket = init.makeProxySocket;
    this.#recorder = init.recorder;
    this.#udpIdleTimeoutMs = init.udpIdleTimeoutMs;
    this.notifier = init.notifier;
  }

  /** Records an event and logs it; a recorder that throws is logged, never propagated. */
  record(ref: ObjectReference, type: EventType, reason: string, message: string): void {
    if (type === 'Warning') this.log.warn(`${reason}: ${message}`);
    else this.log.info(`${reason}: ${message}`);
    try {
      this.#recorder.event(ref, type, reason, message);
    } catch (error) {
      this.log.error('the event recorder failed', error);
    }
  }

  /**
   * Opens a socket for `spec` on `ip:port` (every address when `ip` is null), wraps it in a new
   * ServiceInfo for `portal` and starts its proxy loop. The info is alive but not started: the caller
   * starts it once the load balancer knows the Service port.
   * @throws SocketOpenError (with the factory's error as cause) when the socket cannot be opened.
   */
  async openProxy(
    spec: ServicePortSpec,
    ip: string | null,
    port: number,
    portal: PortalAddress,
    allowedSources?: readonly string[],
  ): Promise<ServiceInfoImpl> {
    const context = new ProxierSocketContext({
      protocol: spec.protocol,
      ip,
      port,
      servicePort: spec.name,
      service: spec.service,
      logger: deferredComponentLogger(this.log, spec.key),
      loadBalancer: this.lb,
      notifier: this.notifier,
      allowedSources,
    });
    let socket: ProxySocket;
    try {
      socket = await this.#makeProxySocket(context);
    } catch (cause) {
      context.abort();
      const where = `${ip ?? '*'}:${port}/${spec.protocol}`;
      throw cause instanceof SocketOpenError
        ? cause
        : new SocketOpenError(`proxy socket for ${spec.key} on ${where}`, { cause });
    }
    let info: ServiceInfoImpl;
    try {
      info = new ServiceInfoImpl({
        serviceRef: spec.serviceRef,
        protocol: spec.protocol,
        portal,
        socket,
        nodePort: spec.nodePort,
        externalIPs: spec.externalIPs,
        loadBalancerIPs: spec.loadBalancerIPs,
        sessionAffinityType: spec.affinity,
        stickyMaxAgeSeconds: spec.stickyMaxAgeSeconds,
        udpIdleTimeoutMs: this.#udpIdleTimeoutMs,
      });
    } catch (cause) {
      // A custom socket whose addr() throws: do not leak it.
      context.abort();
      await socket.close().catch(() => undefined);
      throw new SocketOpenError(`proxy socket for ${spec.key}`, { cause });
    }
    this.log.debug(`proxying ${spec.key} on ${ip ?? '*'}:${port} (socket port ${info.proxyPort})`);
    this.#contexts.set(info, context);
    this.#live.add(socket);
    // One reaction on the socket's own promise (an async wrapper made two more promises and a job
    // per listener: about 150 bytes at 10 000 listeners); a custom socket that throws at once, or
    // returns no promise, is handled alike.
    let loop: Promise<void>;
    try {
      loop = Promise.resolve(socket.proxyLoop(info));
    } catch (error) {
      loop = Promise.reject(error);
    }
    loop.then(
      () => {
        if (info.isAlive() && !this.#stopping)
          this.log.warn(`the proxy loop of ${spec.key} ended while serving`);
      },
      (error: unknown) => this.log.error(`the proxy loop of ${spec.key} failed`, error),
    );
    return info;
  }

  /**
   * Stops a proxy: marks it not alive, closes its socket (established TCP connections carry on; UDP
   * sessions end), then marks it finished. Never throws; a close error is logged.
   */
  async closeProxy(info: ServiceInfoImpl, what: string): Promise<void> {
    info.stop();
    this.#contexts.get(info)?.abort();
    this.#contexts.delete(info);
    const socket = info.socket;
    try {
      await socket.close();
    } catch (error) {
      this.log.error(`closing the proxy socket of ${what} failed`, error);
    }
    this.#forgetWhenIdle(socket);
    info.setFinished();
  }

  /**
   * Stops accepting on every socket; resolves with the connections they still carry. The sockets
   * stay the modes' to release (`shutdown`).
   */
  async stopAccepting(): Promise<number> {
    this.#stopping = true;
    const sockets = [...this.#live];
    await Promise.all(
      sockets.map((socket) =>
        socket.close().catch((error: unknown) => this.log.error('closing a socket failed', error)),
      ),
    );
    return openConnections(sockets);
  }

  /** Waits until every socket's connections have ended, or `deadlineMs` has passed. */
  async waitIdle(deadlineMs: number): Promise<DrainResult> {
    const sockets = [...this.#live];
    const waits = sockets.map((socket) => socket.idle?.() ?? Promise.resolve());
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), Math.max(0, deadlineMs));
    });
    const outcome = await Promise.race([Promise.all(waits).then(() => 'idle' as const), deadline]);
    clearTimeout(timer);
    const remaining = openConnections(sockets);
    return { remaining, timedOut: outcome === 'timeout' && remaining > 0 };
  }

  /**
   * Resets what every socket still carries (`ProxySocket.abortConnections`; sockets without it are
   * left alone): the end of a drain whose deadline passed. A throwing socket is logged.
   */
  abortConnections(): void {
    for (const socket of this.#live) {
      try {
        socket.abortConnections?.();
      } catch (error) {
        this.log.error('resetting the connections of a socket failed', error);
      }
    }
  }

  /** Every socket still carrying connections, closed or not. */
  liveSockets(): readonly ProxySocket[] {
    return [...this.#live];
  }

  #forgetWhenIdle(socket: ProxySocket): void {
    const idle = socket.idle?.();
    if (idle === undefined) {
      this.#live.delete(socket);
      return;
    }
    idle.then(
      () => this.#live.delete(socket),
      () => this.#live.delete(socket),
    );
  }
}

/** A conflict found during a sync; reported at its end if the claim is still refused then. */
interface PendingConflict {
  ref: ObjectReference;
  message: string;
  stillRefused: () => boolean;
}

/**
 * The state of one sync: which addresses are local (read once, only if needed), the UDP addresses
 * whose conntrack entries must go, the Service ports to retry because a port they wait for was
 * released, and the conflicts to report once the sync has settled (so that a port handed from one
 * Service to another within one sync does not produce a spurious event).
 */
export class SyncRun {
  /** Addresses of UDP Service ports stopped in this sync: conntrack is cleared for them at its end. */
  readonly staleUdpIPs = new Set<string>();
  /** Service ports waiting for a claim released in this sync: retried before it ends. */
  readonly retry = new Set<string>();
  /** Service ports this sync has already tried to open: not retried again for an old failure. */
  readonly attempted = new Set<string>();
  readonly #conflicts: PendingConflict[] = [];
  readonly #networkInterfaces: NetworkInterfacesFn;
  #local: Set<string> | undefined;

  constructor(networkInterfaces: NetworkInterfacesFn) {
    this.#networkInterfaces = networkInterfaces;
  }

  /** True when `ip` is one of this host's interface addresses (as the reference's localAddrs). */
  isLocal(ip: string): boolean {
    this.#local ??= localAddresses(this.#networkInterfaces);
    return this.#local.has(ip);
  }

  /** Queues the owners a released claim was holding back, for a retry before the sync ends. */
  retryOwners(owners: Iterable<string>): void {
    for (const owner of owners) this.retry.add(owner);
  }

  /** Queues a conflict to report at the end of the sync unless it resolves first. */
  conflict(ref: ObjectReference, message: string, stillRefused: () => boolean): void {
    this.#conflicts.push({ ref, message, stillRefused });
  }

  /** The conflicts still standing. */
  standingConflicts(): { ref: ObjectReference; message: string }[] {
    return this.#conflicts.filter((c) => c.stillRefused());
  }
}

function openConnections(sockets: readonly ProxySocket[]): number {
  let open = 0;
  for (const socket of sockets) open += socket.activeConnections?.() ?? 0;
  return open;
}
