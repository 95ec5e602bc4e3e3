import diagnosticsChannel from 'node:diagnostics_channel';
import type {
  DrainResult,
  EndpointSlice,
  Endpoints,
  Proxier,
  Service,
  ServiceInfo,
  ServicePortName,
} from '@userspace-proxy/core';
import { CHANNELS } from '@userspace-proxy/core/diagnostics';
import { describe, expect, it } from 'vitest';
import { HybridProxier } from './hybrid-proxier.js';
import { Idler } from './idler.js';
import { IDLED_AT_ANNOTATION } from './idling-predicates.js';
import { RecordingConntrack } from './test-support/fakes.js';

/** A Proxier that records its calls and "syncs" at once when asked (publishing core's sync message). */
class FakeProxier implements Proxier {
  readonly mode = 'service-port-portal' as const;
  readonly calls: string[] = [];
  readonly services = new Map<string, Service>();
  #pending = new Map<string, Service | null>();

  onServiceAdd(s: Service): void {
    this.calls.push(`svc+ ${s.metadata.name}`);
    this.#pending.set(s.metadata.name, s);
  }
  onServiceUpdate(_o: Service, s: Service): void {
    this.calls.push(`svc~ ${s.metadata.name}`);
    this.#pending.set(s.metadata.name, s);
  }
  onServiceDelete(s: Service): void {
    this.calls.push(`svc- ${s.metadata.name}`);
    this.#pending.set(s.metadata.name, null);
  }
  onServiceSynced(): void {}
  onEndpointsAdd(e: Endpoints): void {
    this.calls.push(`ep+ ${e.metadata.name}`);
  }
  onEndpointsUpdate(_o: Endpoints, e: Endpoints): void {
    this.calls.push(`ep~ ${e.metadata.name}`);
  }
  onEndpointsDelete(e: Endpoints): void {
    this.calls.push(`ep- ${e.metadata.name}`);
  }
  onEndpointsSynced(): void {}
  onEndpointSliceAdd(s: EndpointSlice): void {
    this.calls.push(`slice+ ${s.metadata.name}`);
  }
  onEndpointSliceUpdate(_o: EndpointSlice, s: EndpointSlice): void {
    this.calls.push(`slice~ ${s.metadata.name}`);
  }
  onEndpointSliceDelete(s: EndpointSlice): void {
    this.calls.push(`slice- ${s.metadata.name}`);
  }
  onEndpointSlicesSynced(): void {}
  sync(): void {
    for (const [name, s] of this.#pending) {
      if (s === null) this.services.delete(name);
      else this.services.set(name, s);
    }
    this.#pending.clear();
    diagnosticsChannel
      .channel(CHANNELS.sync)
      .publish({ durationMs: 0, changes: 0, servicePorts: 0 });
  }
  async syncLoop(): Promise<void> {}
  getServiceInfo(p: ServicePortName): ServiceInfo | undefined {
    return this.services.has(p.name) ? ({} as ServiceInfo) : undefined;
  }
  serviceInfos(): ServiceInfo[] {
    return [];
  }
  isInitialized(): boolean {
    return true;
  }
  pendingChanges(): number {
    return this.#pending.size;
  }
  async drain(): Promise<DrainResult> {
    return { remaining: 0, timedOut: false };
  }
  async shutdown(): Promise<void> {}
}

const svc = (idled: boolean): Service => ({
  metadata: {
    namespace: 'ns',
    name: 'db',
    ...(idled ? { annotations: { [IDLED_AT_ANNOTATION]: 'x' } } : {}),
  },
  spec: { clusterIP: '10.0.0.9', ports: [{ name: 'dns', port: 53, protocol: 'UDP' }] },
});
const endpoints = (ips: string[]): Endpoints => ({
  metadata: { namespace: 'ns', name: 'db' },
  subsets: ips.length
    ? [{ addresses: ips.map((ip) => ({ ip })), ports: [{ name: 'dns', port: 53 }] }]
    : [],
});

describe('HybridProxier routing (legacy Endpoints, fake proxiers)', () => {
  it('routes a pre-idled add straight to the idler, forwards endpoints while wanted, and forgets them after', async () => {
    const main = new FakeProxier();
    const idling = new FakeProxier();
    const conntrack = new RecordingConntrack();
    const idler = new Idler();
    const hybrid = new HybridProxier({ main, idling, idler, conntrack });
    try {
      hybrid.onEndpointsAdd(endpoints([]));
      hybrid.onServiceAdd(svc(true));
      expect(hybrid.isIdled('ns', 'db')).toBe(true);
      expect(main.calls).toEqual(['ep+ db']);
      expect(idling.calls).toEqual(['ep+ db', 'svc+ db']);
      // A pre-idled add is not a switch: no conntrack.
      expect(conntrack.cleared).toEqual([]);
      idling.sync();

      // Pods: main gets the endpoints (always), and the Service once the idler released it (this
      // fake syncs at once, so within the same call), then conntrack is cleared for its address.
      hybrid.onEndpointsUpdate(endpoints([]), endpoints(['10.1.0.1']));
      expect(hybrid.isIdled('ns', 'db')).toBe(false);
      expect(idling.calls.slice(2)).toEqual(['ep~ db', 'svc- db']);
      expect(main.calls).toEqual(['ep+ db', 'ep~ db', 'svc+ db']);
      await Promise.resolve();
      expect(conntrack.cleared).toEqual([{ ip: '10.0.0.9', protocol: 'UDP' }]);

      // Nothing is held: the next endpoints event makes the idler forget the Service's endpoints.
      hybrid.onEndpointsUpdate(endpoints(['10.1.0.1']), endpoints(['10.1.0.2']));
      expect(idling.calls.at(-1)).toBe('ep- db');
      const before = idling.calls.length;
      hybrid.onEndpointsUpdate(endpoints(['10.1.0.2']), endpoints(['10.1.0.3']));
      expect(idling.calls).toHaveLength(before);

      // Service updates go to the owner only; the delete too.
      hybrid.onServiceUpdate(svc(false), { ...svc(false), spec: { ...svc(false).spec } });
      expect(main.calls.at(-1)).toBe('svc~ db');
      hybrid.onServiceDelete(svc(false));
      expect(main.calls.at(-1)).toBe('svc- db');
      expect(idling.calls.at(-1)).toBe('ep- db');
    } finally {
      await hybrid.shutdown();
    }
  });
});
