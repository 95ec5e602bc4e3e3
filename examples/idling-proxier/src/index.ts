/**
 * Scale to zero, wake on the first request, on the public surface only: a HybridProxier whose
 * idling half holds the clients of a Service that has the `idled-at` annotation and no endpoints,
 * and an unidle hook that "scales it up" — here it starts an HTTP backend in process and publishes
 * its endpoint, as a controller scaling a Deployment would make the EndpointSlice controller do.
 * The held request then reaches the backend and completes.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  type Endpoints,
  newCustomProxier,
  newProxier,
  type Proxier,
  type Service,
} from '@userspace-proxy/core';
import {
  createIdlingProxySocketFactory,
  HybridProxier,
  IDLED_AT_ANNOTATION,
  Idler,
  type NeedPodsRequest,
  type UnidleHook,
} from '@userspace-proxy/idler';

/** A running demo: the proxier, what the hook did, and how to stop everything. */
export interface IdlingDemo {
  proxier: HybridProxier;
  idler: Idler;
  /** The Service address clients use ("ip:8080"). */
  serviceIP: string;
  /** The NeedPods requests the hook received. */
  requests: NeedPodsRequest[];
  stop(): Promise<void>;
}

const NAMESPACE = 'demo';
const NAME = 'web';

function endpoints(ips: string[], port: number): Endpoints {
  return {
    metadata: { namespace: NAMESPACE, name: NAME },
    subsets:
      ips.length === 0
        ? []
        : [{ addresses: ips.map((ip) => ({ ip })), ports: [{ name: 'http', port }] }],
  };
}

/**
 * Starts the proxy for one idled Service on `serviceIP:8080` (a loopback address works: the proxy
 * runs in service-port-portal mode, no NAT rules, no root).
 */
export async function startIdlingDemo(serviceIP: string): Promise<IdlingDemo> {
  const requests: NeedPodsRequest[] = [];
  let backend: Server | undefined;
  let proxier: HybridProxier | undefined;
  const hook: UnidleHook = {
    needPods(request) {
      requests.push(request);
      if (backend !== undefined) return;
      // "Scale up": start the backend, then publish its endpoint.
      const server = createServer((_req, res) => res.end('hello from the woken backend\n'));
      backend = server;
      server.listen(0, '127.0.0.1', () => {
        const port = (server.address() as AddressInfo).port;
        proxier?.onEndpointsUpdate(endpoints([], 0), endpoints(['127.0.0.1'], port));
      });
    },
  };
  const idler = new Idler({ unidleHook: hook });
  const options = {
    mode: 'service-port-portal' as const,
    nodePortAddresses: [],
    minSyncPeriodMs: 10,
  };
  const main: Proxier = await newProxier(options);
  const idling: Proxier = await newCustomProxier(
    options,
    createIdlingProxySocketFactory({ idler }),
  );
  proxier = new HybridProxier({ main, idling, idler });
  const stopLoop = new AbortController();
  const loop = proxier.syncLoop(stopLoop.signal);
  const service: Service = {
    metadata: {
      namespace: NAMESPACE,
      name: NAME,
      annotations: { [IDLED_AT_ANNOTATION]: new Date().toISOString() },
    },
    spec: { clusterIP: serviceIP, ports: [{ name: 'http', protocol: 'TCP', port: 8080 }] },
  };
  proxier.onEndpointsAdd(endpoints([], 0));
  proxier.onServiceAdd(service);
  proxier.onServiceSynced();
  proxier.onEndpointsSynced();
  const hybrid = proxier;
  return {
    proxier,
    idler,
    serviceIP,
    requests,
    async stop() {
      stopLoop.abort();
      await loop;
      await hybrid.shutdown();
      idler.close();
      await new Promise<void>((resolve) => (backend ? backend.close(() => resolve()) : resolve()));
    },
  };
}
