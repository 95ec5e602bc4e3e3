import { isIP } from 'node:net';
import type { AffinityType } from '../load-balancing/load-balancer.js';
import {
  DEFAULT_CLIENT_IP_AFFINITY_SECONDS,
  type ObjectReference,
  type Protocol,
  type Service,
} from '../model/model.js';
import { DEFAULT_NAMESPACE } from '../model/object-key.js';
import { proxyProtocolOf } from '../model/proxy-protocol-annotation.js';
import { type ServicePortName, servicePortNameString } from '../model/service-port-name.js';

/**
 * Everything the Proxier serves for one Service port, read out of a validated Service once per change.
 * Both modes work from this flat record, never from the Service, so that comparing "what is served"
 * with "what is wanted" is a field-by-field check.
 */
export interface ServicePortSpec {
  /** The Service port's name, with its protocol. */
  readonly name: ServicePortName;
  /** `servicePortNameString(name)`: the key of every per-port map. */
  readonly key: string;
  /** The Service, for events. */
  readonly serviceRef: ObjectReference;
  /** The validated Service itself, handed to proxy sockets (annotations included). */
  readonly service: Service;
  /** The Service port's protocol. */
  readonly protocol: Protocol;
  /** The Service port: what clients connect to on the cluster, external and load-balancer IPs. */
  readonly port: number;
  /** 0 when the port has no node port. */
  readonly nodePort: number;
  /** `spec.clusterIP` (or the first of `clusterIPs`). */
  readonly clusterIP: string;
  /** `spec.externalIPs`, in order. */
  readonly externalIPs: readonly string[];
  /** `status.loadBalancer.ingress[].ip`; hostname-only entries are left out. */
  readonly loadBalancerIPs: readonly string[];
  /** `spec.loadBalancerSourceRanges`, trimmed: who may use the load-balancer IPs (empty: anyone). */
  readonly loadBalancerSourceRanges: readonly string[];
  /** "None" or "ClientIP"; an unset affinity is "None", so the two never differ. */
  readonly affinity: AffinityType;
  /** The ClientIP TTL (default 10800 s), 0 when affinity is off. */
  readonly stickyMaxAgeSeconds: number;
  /** The `userspace-proxy.io/proxy-protocol` annotation ("v1", "v2"), "" when off; read by sockets. */
  readonly proxyProtocol: string;
}

/**
 * How a wanted spec differs from the served one:
 * - `same`: nothing to do;
 * - `in-place`: only the Service's identity (uid) or the affinity TTL changed, which need no new
 *   socket: the TTL goes to the load balancer with `newService`, and the infos are updated;
 * - `recreate`: protocol, port, node port, cluster IP, external IPs, load-balancer IPs, their
 *   source ranges, affinity type or PROXY protocol annotation changed, and the proxy for the port is
 *   closed and opened again.
 */
export type SpecChange = 'same' | 'in-place' | 'recreate';

/** True for a Service that is never proxied: no cluster IP ("" or "None": headless), or ExternalName. */
export function shouldSkipService(service: Service): boolean {
  const ip = clusterIPOf(service);
  return ip === '' || ip === 'None' || service.spec.type === 'ExternalName';
}

/**
 * The specs of every port of a validated Service, in spec order; empty for a skipped Service. A port
 * repeated under one name (which validation refuses) keeps its first occurrence.
 */
export function servicePortSpecs(service: Service): ServicePortSpec[] {
  if (shouldSkipService(service)) return [];
  const namespace = service.metadata.namespace || DEFAULT_NAMESPACE;
  const name = service.metadata.name;
  const serviceRef: ObjectReference = { kind: 'Service', apiVersion: 'v1', namespace, name };
  if (service.metadata.uid) serviceRef.uid = service.metadata.uid;
  const clusterIP = clusterIPOf(service);
  const externalIPs = (service.spec.externalIPs ?? []).filter((ip) => isIP(ip) !== 0);
  const loadBalancerIPs: string[] = [];
  for (const ingress of service.status?.loadBalancer?.ingress ?? []) {
    if (ingress.ip && isIP(ingress.ip) !== 0) loadBalancerIPs.push(ingress.ip);
  }
  const loadBalancerSourceRanges = (service.spec.loadBalancerSourceRanges ?? []).map((r) =>
    r.trim(),
  );
  const affinity: AffinityType = service.spec.sessionAffinity === 'ClientIP' ? 'ClientIP' : 'None';
  const stickyMaxAgeSeconds =
    affinity === 'ClientIP'
      ? (service.spec.sessionAffinityConfig?.clientIP?.timeoutSeconds ??
        DEFAULT_CLIENT_IP_AFFINITY_SECONDS)
      : 0;
  const version = proxyProtocolOf(service);
  const proxyProtocol = typeof version === 'string' ? version : '';
  const specs: ServicePortSpec[] = [];
  const seen = new Set<string>();
  for (const port of service.spec.ports ?? []) {
    const protocol = port.protocol ?? 'TCP';
    const portName: ServicePortName = { namespace, name, port: port.name ?? '', protocol };
    const key = servicePortNameString(portName);
    if (seen.has(key)) continue;
    seen.add(key);
    specs.push({
      name: portName,
      key,
      serviceRef,
      service,
      protocol,
      port: port.port,
      nodePort: port.nodePort ?? 0,
      clusterIP,
      externalIPs,
      loadBalancerIPs,
      loadBalancerSourceRanges,
      affinity,
      stickyMaxAgeSeconds,
      proxyProtocol,
    });
  }
  return specs;
}

/**
 * Compares a served spec with a wanted one. Unlike the reference's `sameConfig`, the affinity TTL is
 * compared too (a TTL change used to be ignored until the Service was re-created), but it is applied
 * in place rather than by re-opening sockets.
 */
export function compareSpecs(served: ServicePortSpec, wanted: ServicePortSpec): SpecChange {
  if (
    served.protocol !== wanted.protocol ||
    served.port !== wanted.port ||
    served.nodePort !== wanted.nodePort ||
    served.clusterIP !== wanted.clusterIP ||
    served.affinity !== wanted.affinity ||
    served.proxyProtocol !== wanted.proxyProtocol ||
    !sameList(served.externalIPs, wanted.externalIPs) ||
    !sameList(served.loadBalancerIPs, wanted.loadBalancerIPs) ||
    !sameList(served.loadBalancerSourceRanges, wanted.loadBalancerSourceRanges)
  ) {
    return 'recreate';
  }
  if (
    served.stickyMaxAgeSeconds !== wanted.stickyMaxAgeSeconds ||
    served.serviceRef.uid !== wanted.serviceRef.uid
  ) {
    return 'in-place';
  }
  return 'same';
}

/** The addresses of a spec whose traffic must be forgotten by conntrack when its UDP port goes. */
export function specAddresses(spec: ServicePortSpec): string[] {
  return [spec.clusterIP, ...spec.externalIPs, ...spec.loadBalancerIPs];
}

function clusterIPOf(service: Service): string {
  return service.spec.clusterIP ?? service.spec.clusterIPs?.[0] ?? '';
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((value, i) => value === b[i]);
}
