import type { Service } from '@userspace-proxy/core';
import { IDLED_AT_ANNOTATION } from '@userspace-proxy/idler';

/**
 * Which worker serves what. TCP listeners are shared by every worker (each accepts on the same
 * descriptor). Everything whose state must stay whole lives in worker 0 only: UDP (a flow split
 * across workers would lose its session), SCTP (its associations ride one UDP socket per address),
 * and with idling on, Services carrying the idled-at annotation (held clients and NeedPods are
 * counted once per Service). Endpoints go to every worker: a worker without the Service ignores them.
 */

/** What a worker is given of a Service: worker 0 gets it whole, the others its TCP ports only. */
export function serviceFor(
  service: Service,
  index: number,
  options: { idling: boolean },
): Service | undefined {
  if (index === 0) return service;
  if (options.idling && service.metadata?.annotations?.[IDLED_AT_ANNOTATION] !== undefined) {
    return undefined;
  }
  const ports = service.spec?.ports ?? [];
  const tcp = ports.filter((p) => (p.protocol ?? 'TCP') === 'TCP');
  if (tcp.length === 0) return undefined;
  if (tcp.length === ports.length) return service;
  return { ...service, spec: { ...service.spec, ports: tcp } };
}
