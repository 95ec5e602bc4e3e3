import type { EndpointSlice, Endpoints, Service, ServicePortName } from '@userspace-proxy/core';

/**
 * What the hybrid proxier reads from Services and their endpoints to decide who owns a Service
 * (OpenShift's predicate, §2.1 of the reference) and what to clean on a switch.
 */

/** The annotation `oc idle` puts on an idled Service (its value is not read). */
export const IDLED_AT_ANNOTATION = 'idling.alpha.openshift.io/idled-at';

/** True when `service` carries the `idled-at` annotation. */
export function isIdledService(service: Service): boolean {
  return service.metadata.annotations?.[IDLED_AT_ANNOTATION] !== undefined;
}

/** The label naming an EndpointSlice's Service. */
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

/** Where a Service's endpoints come from: its EndpointSlices or its legacy Endpoints object. */
export type EndpointsSourceKind = 'slice' | 'endpoints';

/** The Service ports of `service`, as core names them. */
export function servicePorts(service: Service): ServicePortName[] {
  return (service.spec.ports ?? []).map((port) => ({
    namespace: service.metadata.namespace || 'default',
    name: service.metadata.name,
    port: port.name ?? '',
    protocol: port.protocol ?? 'TCP',
  }));
}

/** The addresses a client reaches the Service on: cluster IPs, external IPs, load-balancer IPs. */
export function serviceAddresses(service: Service): string[] {
  const ips = new Set<string>();
  const add = (ip: string | undefined): void => {
    if (ip !== undefined && ip !== '' && ip !== 'None') ips.add(ip);
  };
  add(service.spec.clusterIP);
  for (const ip of service.spec.clusterIPs ?? []) add(ip);
  for (const ip of service.spec.externalIPs ?? []) add(ip);
  for (const ingress of service.status?.loadBalancer?.ingress ?? []) add(ingress.ip);
  return [...ips];
}

/** No endpoint that core's load balancer would use (ready, or serving and terminating). */
export function isEmptySource(
  object: EndpointSlice | Endpoints,
  kind: EndpointsSourceKind,
): boolean {
  if (kind === 'endpoints') {
    return !(object as Endpoints).subsets?.some((subset) => (subset.addresses?.length ?? 0) > 0);
  }
  return !(object as EndpointSlice).endpoints?.some(
    (e) =>
      (e.addresses?.length ?? 0) > 0 &&
      (e.conditions?.ready !== false ||
        (e.conditions?.serving === true && e.conditions?.terminating === true)),
  );
}
