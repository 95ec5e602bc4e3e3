import type { Protocol } from '../model/model.js';
import type { ServiceInfo } from '../model/service-info.js';

/** A ServiceInfo whose liveness a test can flip. */
export interface FakeServiceInfo extends ServiceInfo {
  alive: boolean;
}

/**
 * A plain ServiceInfo for driving a ProxySocket without a Proxier: alive and started, affinity off,
 * a 10 s UDP idle timeout (the Proxier's default) unless overridden.
 */
export function fakeServiceInfo(
  overrides: Partial<Omit<ServiceInfo, 'isAlive' | 'isStarted' | 'isFinished'>> & {
    protocol?: Protocol;
  } = {},
): FakeServiceInfo {
  const info: FakeServiceInfo = {
    serviceRef: { kind: 'Service', namespace: 'ns', name: 'svc' },
    protocol: 'TCP',
    portal: { ip: '127.0.0.1', port: 0, isExternal: false },
    proxyPort: 0,
    nodePort: 0,
    externalIPs: [],
    loadBalancerIPs: [],
    sessionAffinityType: 'None',
    stickyMaxAgeSeconds: 0,
    udpIdleTimeoutMs: 10_000,
    activeClients: new Map(),
    ...overrides,
    alive: true,
    isAlive: () => info.alive,
    isStarted: () => true,
    isFinished: () => !info.alive,
  };
  return info;
}
