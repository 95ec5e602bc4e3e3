import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import { type Logger, noopLogger } from '../logger.js';
import type { Protocol, Service } from '../model/model.js';
import type { ServiceInfo } from '../model/service-info.js';
import type { ServicePortName } from '../model/service-port-name.js';
import type { EndpointsChangedListener, ProxySocketContext } from './proxy-socket.js';

/** Options of {@link createSocketContext}; only the load balancer is required. */
export interface SocketContextOptions {
  /** Picks each connection's endpoint; feed it Endpoints (`onEndpointsAdd`) yourself. */
  loadBalancer: LoadBalancer;
  /** Default "TCP". */
  protocol?: Protocol;
  /** Default "127.0.0.1". */
  ip?: string | null;
  /** Default 0 (the OS chooses). */
  port?: number;
  /** Default `default/test:` with the protocol. */
  servicePort?: ServicePortName;
  /** Default: a minimal Service named after `servicePort`. */
  service?: Service;
  /** Default: silent. */
  logger?: Logger;
  /** Default: a signal that `abort()` on the returned context aborts. */
  signal?: AbortSignal;
  /** CIDRs clients must come from (ProxySocketContext.allowedSources). Default: anyone. */
  allowedSources?: readonly string[];
}

/** A context made outside a Proxier, with the two things a Proxier would otherwise do. */
export interface StandaloneSocketContext extends ProxySocketContext {
  /** Tells the subscribers that the endpoints changed, as the Proxier does after each event. */
  notifyEndpointsChanged(): void;
  /** Aborts the context's own signal (when no `signal` was given). */
  abort(): void;
}

/**
 * Builds a {@link ProxySocketContext} without a Proxier: for testing a socket or an accept policy
 * on its own, or for running the default sockets in a program of one's own. Feed the load
 * balancer, then call `notifyEndpointsChanged()`.
 */
export function createSocketContext(options: SocketContextOptions): StandaloneSocketContext {
  const protocol = options.protocol ?? 'TCP';
  const servicePort = options.servicePort ?? {
    namespace: 'default',
    name: 'test',
    port: '',
    protocol,
  };
  const controller = new AbortController();
  const signal = options.signal ?? controller.signal;
  const listeners = new Set<EndpointsChangedListener>();
  const logger = options.logger ?? noopLogger;
  const lb = options.loadBalancer;
  return {
    protocol,
    ip: options.ip === undefined ? '127.0.0.1' : options.ip,
    port: options.port ?? 0,
    servicePort,
    service: options.service ?? {
      metadata: { namespace: servicePort.namespace, name: servicePort.name },
      spec: { ports: [{ name: servicePort.port, port: options.port ?? 0, protocol }] },
    },
    logger,
    signal,
    loadBalancer: lb,
    ...(options.allowedSources !== undefined ? { allowedSources: options.allowedSources } : {}),
    onEndpointsChanged(listener) {
      listeners.add(listener);
      const off = (): void => {
        listeners.delete(listener);
      };
      signal.addEventListener('abort', off, { once: true });
      return off;
    },
    notifyEndpointsChanged() {
      const change = { servicePort, hasEndpoints: lb.serviceHasEndpoints(servicePort) };
      for (const listener of [...listeners]) {
        try {
          listener(change);
        } catch (error) {
          logger.error('an endpoints-changed listener failed', error);
        }
      }
    },
    abort() {
      controller.abort();
    },
  };
}

/** What {@link createServiceInfo} returns: a ServiceInfo whose life a caller ends with `stop()`. */
export interface StandaloneServiceInfo extends ServiceInfo {
  /** Marks the info not alive (and finished): a socket's loop then ends at its next connection. */
  stop(): void;
}

/**
 * The ServiceInfo to hand `proxyLoop` when a socket runs without a Proxier: alive and started,
 * affinity off, the Proxier's 10 s UDP idle timeout, the context's Service and address; any field
 * can be overridden.
 */
export function createServiceInfo(
  context: ProxySocketContext,
  overrides: Partial<Omit<ServiceInfo, 'isAlive' | 'isStarted' | 'isFinished'>> = {},
): StandaloneServiceInfo {
  let alive = true;
  const { metadata } = context.service;
  return {
    serviceRef: {
      kind: 'Service',
      apiVersion: 'v1',
      namespace: metadata.namespace ?? context.servicePort.namespace,
      name: metadata.name,
    },
    protocol: context.protocol,
    portal: { ip: context.ip ?? '', port: context.port, isExternal: false },
    proxyPort: context.port,
    nodePort: 0,
    externalIPs: [],
    loadBalancerIPs: [],
    sessionAffinityType: 'None',
    stickyMaxAgeSeconds: 0,
    udpIdleTimeoutMs: 10_000,
    activeClients: new Map(),
    ...overrides,
    isAlive: () => alive,
    isStarted: () => alive,
    isFinished: () => !alive,
    stop: () => {
      alive = false;
    },
  };
}
