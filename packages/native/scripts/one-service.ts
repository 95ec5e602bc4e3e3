/**
 * What the measuring scripts beside this file share: one native TCP socket on 127.0.0.1 for a
 * Service with one endpoint (core's round-robin balancer), proxying until `close()`.
 */
import {
  createProxySocketFactory,
  type ProxySocket,
  RoundRobinLoadBalancer,
} from '@userspace-proxy/core';
import { createServiceInfo, createSocketContext } from '@userspace-proxy/core/sockets';
import { type NativeTcpFactory, type NativeTcpOptions, withNativeTcp } from '../src/index.js';

/** The socket, its factory (for the helper's pid and counters), and how to stop both. */
export interface OneService {
  readonly f: NativeTcpFactory;
  readonly socket: ProxySocket;
  close(): Promise<void>;
}

/** Opens the socket; `affinity` ClientIP keeps every accept on the per-accept path. */
export async function openOneService(
  endpointPort: number,
  affinity: 'None' | 'ClientIP',
  options: NativeTcpOptions,
): Promise<OneService> {
  const servicePort = { namespace: 'ns', name: 'one', port: 'p', protocol: 'TCP' as const };
  const lb = new RoundRobinLoadBalancer();
  lb.newService(servicePort, affinity, 0);
  lb.onEndpointsAdd({
    metadata: { namespace: 'ns', name: 'one' },
    subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'p', port: endpointPort }] }],
  });
  const f = withNativeTcp(createProxySocketFactory(), options);
  const ctx = createSocketContext({
    loadBalancer: lb,
    protocol: 'TCP',
    ip: '127.0.0.1',
    servicePort,
  });
  const socket = await f(ctx);
  const loop = socket.proxyLoop(createServiceInfo(ctx, { sessionAffinityType: affinity }));
  return {
    f,
    socket,
    close: async () => {
      ctx.abort();
      await socket.close();
      await loop;
      await f.close();
    },
  };
}
