import type { EndpointsHandler } from '../config/handlers.js';
import type { Addr } from '../model/model.js';
import type { ServicePortName } from '../model/service-port-name.js';

/** "ClientIP" enables stickiness; "None" and "" (unset in a raw object) disable it. */
export type AffinityType = 'None' | 'ClientIP' | '';

/**
 * Picks an endpoint for each new connection or UDP session of a Service port. It learns endpoints as
 * an {@link EndpointsHandler} (EndpointSlices reach it merged into Endpoints-shaped objects by the
 * Proxier) and Services through `newService` / `deleteService`, called by the Proxier during a sync.
 * Every method is synchronous and called from the event loop only.
 */
export interface LoadBalancer extends EndpointsHandler {
  /**
   * The endpoint ("ip:port") for a new connection from `srcAddr`. With ClientIP affinity a client
   * keeps its endpoint while its record is fresh, unless `sessionAffinityReset` is true, in which case
   * the next endpoint is taken and the record overwritten (used after a failed dial).
   * @throws MissingServiceEntryError when the Service port is unknown.
   * @throws MissingEndpointsError when it has no endpoint.
   */
  nextEndpoint(
    svcPort: ServicePortName,
    srcAddr: Addr | null,
    sessionAffinityReset: boolean,
  ): string;
  /** Registers (or updates) a Service port. `ttlSeconds` 0 means the default of 10800 s. */
  newService(svcPort: ServicePortName, affinityType: AffinityType, ttlSeconds: number): void;
  /** Forgets a Service port entirely, endpoints and affinity included. */
  deleteService(svcPort: ServicePortName): void;
  /** Drops affinity records older than the TTL; the Proxier calls it after each sync. */
  cleanupStaleStickySessions(svcPort: ServicePortName): void;
  /** True when the Service port is known and has at least one endpoint. */
  serviceHasEndpoints(svcPort: ServicePortName): boolean;
  /**
   * Optional: the outcome of one dial attempt to `endpoint` (an "ip:port" this balancer returned),
   * reported by the TCP dialer after each attempt: `ok` false on a refusal, reset or timeout (not on
   * this host running out of descriptors, nor on a dial aborted by the proxy), true on connect. A
   * failure is reported just before the retry's `nextEndpoint` call, in the same synchronous step.
   * What a balancer does with it is its own choice: the round-robin one ejects endpoints that keep
   * failing (passive outlier ejection) and keeps the rotation fair across retries. Must not throw.
   */
  reportDialResult?(svcPort: ServicePortName, endpoint: string, ok: boolean): void;
  /**
   * Optional: the endpoints ("ip:port") `nextEndpoint` may currently return for the port (empty
   * when unknown). The default UDP socket reads it after each endpoints change to end the sessions
   * pinned to an endpoint that left, which would otherwise live as long as their client keeps
   * sending (kubernetes#19029, "UDP flows stuck to old backends"); without it, they run until idle.
   */
  endpoints?(svcPort: ServicePortName): readonly string[];
}
