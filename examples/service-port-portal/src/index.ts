/**
 * Services served in service-port-portal mode: one real listener per Service port and address, so no
 * NAT rule and no root are needed. Services and Endpoints come from in-memory informers (swap in a
 * manifest file or a Kubernetes informer: the wiring is the same), are fanned out by ServiceConfig
 * and EndpointsConfig, and the Proxier listens on each Service's cluster IP, external IPs and node
 * port. On Linux every 127.0.0.0/8 address is local, which makes 127.x "cluster IPs" work on any
 * machine.
 *
 *   npx -y pnpm@12.4.2 --filter @userspace-proxy/example-service-port-portal start
 */
import { createServer, type Server } from 'node:net';
import { pathToFileURL } from 'node:url';
import {
  type Endpoints,
  EndpointsConfig,
  type Logger,
  newProxier,
  type Proxier,
  type Service,
  ServiceConfig,
  StaticInformer,
} from '@userspace-proxy/core';

/** A running portal-mode proxy and the stores that feed it. */
export interface PortalProxy {
  proxier: Proxier;
  /** Add, update or delete Services here; the proxy follows. */
  services: StaticInformer<Service>;
  /** Add, update or delete Endpoints here; the load balancer follows at once. */
  endpoints: StaticInformer<Endpoints>;
  /** Stops syncing and closes every listener; established connections carry on. */
  stop(): Promise<void>;
}

/** Options of {@link startPortalProxy}. */
export interface PortalProxyOptions {
  /** Where node ports listen. Default: the loopback addresses ("127.0.0.0/8"). */
  nodePortAddresses?: string[];
  logger?: Logger;
}

/** Builds the informers, the fan-out and the Proxier, and starts them. */
export async function startPortalProxy(options: PortalProxyOptions = {}): Promise<PortalProxy> {
  const services = new StaticInformer<Service>({ kind: 'Service' });
  const endpoints = new StaticInformer<Endpoints>({ kind: 'Endpoints' });
  const proxier = await newProxier({
    mode: 'service-port-portal',
    nodePortAddresses: options.nodePortAddresses ?? ['127.0.0.0/8'],
    ...(options.logger ? { logger: options.logger } : {}),
  });

  const serviceConfig = new ServiceConfig(services);
  serviceConfig.registerEventHandler(proxier);
  const endpointsConfig = new EndpointsConfig(endpoints);
  endpointsConfig.registerEventHandler(proxier);

  const stopping = new AbortController();
  const running = Promise.all([
    serviceConfig.run(stopping.signal),
    endpointsConfig.run(stopping.signal),
    proxier.syncLoop(stopping.signal),
  ]);
  return {
    proxier,
    services,
    endpoints,
    async stop() {
      stopping.abort();
      await proxier.shutdown();
      await running;
    },
  };
}

/** A Service with one TCP port on `clusterIP`, and optionally a node port. */
export function tcpService(name: string, clusterIP: string, port: number, nodePort = 0): Service {
  return {
    metadata: { namespace: 'demo', name },
    spec: {
      type: nodePort ? 'NodePort' : 'ClusterIP',
      clusterIP,
      ports: [{ name: 'tcp', protocol: 'TCP', port, ...(nodePort ? { nodePort } : {}) }],
    },
  };
}

/** The Endpoints of {@link tcpService}: `ip:port` of each backend. */
export function tcpEndpoints(name: string, backends: { ip: string; port: number }[]): Endpoints {
  return {
    metadata: { namespace: 'demo', name },
    subsets: backends.map(({ ip, port }) => ({
      addresses: [{ ip }],
      ports: [{ name: 'tcp', protocol: 'TCP', port }],
    })),
  };
}

async function main(): Promise<void> {
  // A backend that greets with its own name.
  const backend: Server = createServer((socket) => socket.end('hello from the backend\n'));
  await new Promise<void>((resolve) => backend.listen(0, '127.0.0.1', resolve));
  const address = backend.address();
  if (address === null || typeof address === 'string') throw new Error('no backend address');

  const proxy = await startPortalProxy();
  proxy.endpoints.add(tcpEndpoints('web', [{ ip: '127.0.0.1', port: address.port }]));
  proxy.services.add(tcpService('web', '127.1.0.10', 8080, 30080));
  const connect = (port: number, host: string) =>
    `node -e "require('net').connect(${port}, '${host}').pipe(process.stdout)"`;
  console.log(
    `try: ${connect(8080, '127.1.0.10')}   (the cluster IP)\n` +
      `  or ${connect(30080, '127.0.0.1')}   (the node port); Ctrl-C stops`,
  );
  process.once('SIGINT', () => {
    void proxy.stop().then(() => backend.close());
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
