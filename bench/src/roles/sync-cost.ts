import diagnosticsChannel from 'node:diagnostics_channel';
import { type Endpoints, newProxier, type Proxier, type Service } from '@userspace-proxy/core';
import { CHANNELS } from '@userspace-proxy/core/diagnostics';
import { until } from './proxy-host.js';

/** What programming many Services costs the Proxier. */
export interface SyncCost {
  services: number;
  endpoints: number;
  /** From the first event to every Service port started (listening, load balancer ready). */
  programMs: number;
  /** Median time for one endpoint change to be applied (it is synchronous), microseconds. */
  endpointChangeUs: number;
  /** One Service's port changed: time until its new listener is started. */
  serviceChangeMs: number;
  /** Resident memory with everything programmed, after a GC. */
  rssBytes: number;
  heapUsedBytes: number;
}

const ip = (i: number) => `127.${110 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;

function service(i: number, port = 80): Service {
  return {
    metadata: { name: `svc-${i}`, namespace: 'bench', uid: `uid-${i}` },
    spec: { clusterIP: ip(i + 1), ports: [{ name: 'http', port, protocol: 'TCP' }] },
  };
}

function endpoints(i: number, count: number, base = 0): Endpoints {
  const addresses = [];
  for (let k = 0; k < count; k++)
    addresses.push({ ip: `10.${(i >> 8) & 255}.${i & 255}.${(k + base) % 250}` });
  return {
    metadata: { name: `svc-${i}`, namespace: 'bench' },
    subsets: [{ addresses, ports: [{ name: 'http', port: 8080, protocol: 'TCP' }] }],
  };
}

/**
 * Resolves with the time of the first sync after which `count` Service ports are started. It looks
 * only when a sync ends: polling `serviceInfos()` every few ms, as this did first, walked 10 000
 * infos on the very event loop being measured and slowed the programming it timed.
 */
function afterSyncs(proxier: Proxier, count: number, timeoutMs: number): Promise<number> {
  const channel = diagnosticsChannel.channel(CHANNELS.sync);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      channel.unsubscribe(onSync);
      reject(new Error(`timed out waiting for ${count} services to start`));
    }, timeoutMs);
    function onSync(): void {
      const at = performance.now();
      const started = proxier.serviceInfos().filter((info) => info.isStarted()).length;
      if (started < count) return;
      clearTimeout(timer);
      channel.unsubscribe(onSync);
      resolve(at);
    }
    channel.subscribe(onSync);
  });
}

/**
 * Programs `services` Services with `endpointsPerService` endpoints each in ServicePortPortal mode
 * (one real listener per Service on its own 127.x address), then changes one endpoint list and one
 * Service with all of them present.
 */
export async function syncCost(services: number, endpointsPerService: number): Promise<SyncCost> {
  const proxier = await newProxier({ mode: 'service-port-portal', minSyncPeriodMs: 0 });
  const loop = new AbortController();
  void proxier.syncLoop(loop.signal);
  const t0 = performance.now();
  const allStarted = afterSyncs(proxier, services, 120_000);
  for (let i = 0; i < services; i++) proxier.onServiceAdd(service(i));
  for (let i = 0; i < services; i++) proxier.onEndpointsAdd(endpoints(i, endpointsPerService));
  proxier.onServiceSynced();
  proxier.onEndpointsSynced();
  const programMs = (await allStarted) - t0;

  const samples: number[] = [];
  for (let r = 0; r < 101; r++) {
    const i = (r * 7919) % services;
    const before = endpoints(i, endpointsPerService, r);
    const after = endpoints(i, endpointsPerService, r + 1);
    const s = performance.now();
    proxier.onEndpointsUpdate(before, after);
    samples.push((performance.now() - s) * 1000);
  }
  samples.sort((a, b) => a - b);

  const target = Math.floor(services / 2);
  const svcPort = { namespace: 'bench', name: `svc-${target}`, port: 'http' };
  const old = proxier.getServiceInfo(svcPort, ip(target + 1));
  const s = performance.now();
  proxier.onServiceUpdate(service(target), service(target, 81));
  await until(
    () => {
      const info = proxier.getServiceInfo(svcPort, ip(target + 1));
      return info !== undefined && info !== old && info.isStarted();
    },
    60_000,
    'the changed service',
  );
  const serviceChangeMs = performance.now() - s;

  (globalThis as { gc?: () => void }).gc?.();
  const mem = process.memoryUsage();
  loop.abort();
  await proxier.shutdown();
  return {
    services,
    endpoints: services * endpointsPerService,
    programMs,
    endpointChangeUs: samples[Math.floor(samples.length / 2)] ?? 0,
    serviceChangeMs,
    rssBytes: mem.rss,
    heapUsedBytes: mem.heapUsed,
  };
}
