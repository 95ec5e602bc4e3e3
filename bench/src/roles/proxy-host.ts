import v8 from 'node:v8';
import {
  type Endpoints,
  newProxier,
  type Proxier,
  type ProxySocketOptions,
  type Service,
  type ServicePortName,
} from '@userspace-proxy/core';
import { processStats } from '../rpc.js';
import type { BackendPorts } from './backend.js';
import { naiveTcpRelay, naiveUdpRelay } from './naive-relay.js';

/** Where a proxy under test serves each backend: the same port names as {@link BackendPorts}. */
export interface Frontend {
  host: string;
  ports: BackendPorts;
}

/** The Service ports the benchmark Service exposes, name → protocol and service port. */
const SERVICE_PORTS = {
  tcpSink: { protocol: 'TCP', port: 5001 },
  tcpEcho: { protocol: 'TCP', port: 5002 },
  tcpHttp: { protocol: 'TCP', port: 5003 },
  udpSink: { protocol: 'UDP', port: 5004 },
  udpEcho: { protocol: 'UDP', port: 5005 },
} as const;

/** Per-process addresses, so a smoke run never collides with a benchmark running beside it. */
const octet = () => 1 + Math.floor(Math.random() * 250);
const HOST = `${octet()}.${octet()}`;
const NAIVE_HOST = `127.201.${HOST}`;
const PROXY_HOST = `127.200.${HOST}`;
let proxier: Proxier | undefined;

/** Polls until `cond` holds, or fails after `ms`. */
export async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

function benchService(
  backend: BackendPorts,
  clusterIP: string,
): { service: Service; endpoints: Endpoints } {
  const names = Object.keys(SERVICE_PORTS) as (keyof BackendPorts)[];
  const meta = { name: 'bench', namespace: 'default' };
  return {
    service: {
      metadata: meta,
      spec: {
        clusterIP,
        ports: names.map((name) => ({ name: name.toLowerCase(), ...SERVICE_PORTS[name] })),
      },
    },
    endpoints: {
      metadata: meta,
      subsets: [
        {
          addresses: [{ ip: '127.0.0.1' }],
          ports: names.map((name) => ({
            name: name.toLowerCase(),
            port: backend[name],
            protocol: SERVICE_PORTS[name].protocol,
          })),
        },
      ],
    },
  };
}

/**
 * Starts the naive relay and the real Proxier (ServicePortPortal mode) in front of `backend`, on
 * `hosts` (a second proxy host, as the memory scenario starts, needs addresses of its own).
 */
async function start(
  backend: BackendPorts,
  hosts: { naive: string; proxy: string } = { naive: NAIVE_HOST, proxy: PROXY_HOST },
): Promise<{ naive: Frontend; proxy: Frontend }> {
  const names = Object.keys(SERVICE_PORTS) as (keyof BackendPorts)[];
  for (const name of names) {
    const { protocol, port } = SERVICE_PORTS[name];
    if (protocol === 'TCP') await naiveTcpRelay(hosts.naive, port, backend[name]);
    else await naiveUdpRelay(hosts.naive, port, backend[name]);
  }
  proxier = await newProxier({
    mode: 'service-port-portal',
    minSyncPeriodMs: 0,
    // BENCH_PROXY_SOCKET: JSON proxy-socket options, to measure what one option costs.
    ...(process.env.BENCH_PROXY_SOCKET
      ? { proxySocket: JSON.parse(process.env.BENCH_PROXY_SOCKET) as ProxySocketOptions }
      : {}),
  });
  void proxier.syncLoop();
  const { service, endpoints } = benchService(backend, hosts.proxy);
  proxier.onEndpointsAdd(endpoints);
  proxier.onEndpointsSynced();
  proxier.onServiceAdd(service);
  proxier.onServiceSynced();
  const p = proxier;
  for (const name of names) {
    const svcPort: ServicePortName = {
      namespace: 'default',
      name: 'bench',
      port: name.toLowerCase(),
    };
    await until(() => p.getServiceInfo(svcPort, hosts.proxy)?.isStarted() === true, 10_000, name);
  }
  const ports = Object.fromEntries(
    names.map((n) => [n, SERVICE_PORTS[n].port]),
  ) as unknown as BackendPorts;
  return { naive: { host: hosts.naive, ports }, proxy: { host: hosts.proxy, ports } };
}

/** The methods the orchestrator calls on the proxy process. */
export const proxyMethods = {
  start,
  stats: processStats,
  pid: () => ({ pid: process.pid }),
  /** Writes a V8 heap snapshot (for `--profile`-style investigation); returns its file name. */
  heapSnapshot: (file?: string) => v8.writeHeapSnapshot(file),
  gc: () => {
    (globalThis as { gc?: () => void }).gc?.();
  },
  syncCost: async (services: number, endpointsPerService: number) =>
    (await import('./sync-cost.js')).syncCost(services, endpointsPerService),
};
