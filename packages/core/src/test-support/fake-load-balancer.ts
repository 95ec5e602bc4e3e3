import { MissingEndpointsError, MissingServiceEntryError } from '../errors.js';
import type { AffinityType, LoadBalancer } from '../load-balancing/load-balancer.js';
import type { Addr, Endpoints } from '../model/model.js';
import { type ServicePortName, servicePortNameString } from '../model/service-port-name.js';

/** One call of {@link FakeLoadBalancer.nextEndpoint}, as recorded. */
export interface NextEndpointCall {
  service: string;
  srcAddr: Addr | null;
  sessionAffinityReset: boolean;
  /** What was returned, or the error's code. */
  result: string;
}

/**
 * A predictable LoadBalancer for socket tests: plain round robin over the endpoints a test sets,
 * optional ClientIP stickiness (by address, honouring `sessionAffinityReset`), every pick recorded.
 * Unknown Service → MissingServiceEntryError; empty list → MissingEndpointsError, like the real one.
 */
export class FakeLoadBalancer implements LoadBalancer {
  readonly calls: NextEndpointCall[] = [];
  readonly #endpoints = new Map<string, string[]>();
  readonly #next = new Map<string, number>();
  readonly #sticky = new Map<string, string>();
  readonly #affinity: boolean;

  /** `affinity`: stick each client address to its endpoint until a reset. */
  constructor(endpoints: Record<string, string[]> = {}, opts: { affinity?: boolean } = {}) {
    for (const [key, list] of Object.entries(endpoints)) this.#endpoints.set(key, [...list]);
    this.#affinity = opts.affinity ?? false;
  }

  /** Sets (or replaces) the endpoints of a Service port; [] makes it "known, no endpoints". */
  setEndpoints(svcPort: ServicePortName | string, endpoints: string[]): void {
    const key = typeof svcPort === 'string' ? svcPort : servicePortNameString(svcPort);
    this.#endpoints.set(key, [...endpoints]);
  }

  nextEndpoint(svcPort: ServicePortName, srcAddr: Addr | null, reset: boolean): string {
    const key = servicePortNameString(svcPort);
    const record = (result: string): void => {
      this.calls.push({ service: key, srcAddr, sessionAffinityReset: reset, result });
    };
    const list = this.#endpoints.get(key);
    if (list === undefined) {
      record('ERR_MISSING_SERVICE_ENTRY');
      throw new MissingServiceEntryError(key);
    }
    if (list.length === 0) {
      record('ERR_MISSING_ENDPOINTS');
      throw new MissingEndpointsError(key);
    }
    const stickyKey = srcAddr === null ? undefined : `${key}|${srcAddr.address}`;
    if (this.#affinity && stickyKey !== undefined && !reset) {
      const sticky = this.#sticky.get(stickyKey);
      if (sticky !== undefined && list.includes(sticky)) {
        record(sticky);
        return sticky;
      }
    }
    const index = (this.#next.get(key) ?? 0) % list.length;
    this.#next.set(key, index + 1);
    const endpoint = list[index] as string;
    if (this.#affinity && stickyKey !== undefined) this.#sticky.set(stickyKey, endpoint);
    record(endpoint);
    return endpoint;
  }

  newService(svcPort: ServicePortName, _affinityType: AffinityType, _ttlSeconds: number): void {
    const key = servicePortNameString(svcPort);
    if (!this.#endpoints.has(key)) this.#endpoints.set(key, []);
  }

  deleteService(svcPort: ServicePortName): void {
    this.#endpoints.delete(servicePortNameString(svcPort));
  }

  cleanupStaleStickySessions(_svcPort: ServicePortName): void {}

  serviceHasEndpoints(svcPort: ServicePortName): boolean {
    return (this.#endpoints.get(servicePortNameString(svcPort))?.length ?? 0) > 0;
  }

  onEndpointsAdd(_endpoints: Endpoints): void {}
  onEndpointsUpdate(_old: Endpoints, _endpoints: Endpoints): void {}
  onEndpointsDelete(_endpoints: Endpoints): void {}
  onEndpointsSynced(): void {}
}
