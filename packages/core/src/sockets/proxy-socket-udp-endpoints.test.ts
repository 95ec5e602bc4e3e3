import { afterEach, describe, expect, it } from 'vitest';
import { CHANNELS, type UdpSessionCloseMessage } from '../diagnostics.js';
import { RoundRobinLoadBalancer } from '../load-balancing/load-balancer-round-robin.js';
import type { Endpoints } from '../model/model.js';
import { splitHostPort } from '../model/service-port-name.js';
import { startUdpEchoServer, type UdpEchoServer } from '../test-support/echo-servers.js';
import { type UdpTestClient, udpClient } from '../test-support/net-clients.js';
import { recordChannel } from '../test-support/record-channel.js';
import { UdpProxySocket } from './proxy-socket-udp.js';
import { createServiceInfo, createSocketContext } from './socket-context.js';

/**
 * A UDP session pinned to an endpoint that left the Service ends at the next endpoints change, so a
 * client that never goes quiet (statsd, syslog, a resolver reusing its port) moves to a live
 * endpoint instead of sending to a deleted pod until it stops (kubernetes#19029). Built only from
 * what core exports: the round-robin balancer, `createSocketContext`, `createServiceInfo`.
 */
const servicePort = { namespace: 'ns', name: 'stats', port: 'udp', protocol: 'UDP' as const };
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

function endpointsOf(list: string[]): Endpoints {
  return {
    metadata: { namespace: 'ns', name: 'stats' },
    subsets: list.map((hostPort) => {
      const { host, port } = splitHostPort(hostPort) ?? { host: hostPort, port: 0 };
      return { addresses: [{ ip: host }], ports: [{ name: 'udp', port }] };
    }),
  };
}

async function echo(host: string, prefix: string): Promise<UdpEchoServer> {
  const server = await startUdpEchoServer({ host, prefix });
  cleanup.push(() => server.close());
  return server;
}

async function setup(first: string[]) {
  const lb = new RoundRobinLoadBalancer();
  lb.newService(servicePort, 'None', 0);
  let current = endpointsOf(first);
  lb.onEndpointsAdd(current);
  const context = createSocketContext({
    protocol: 'UDP',
    ip: '127.1.7.1',
    loadBalancer: lb,
    servicePort,
  });
  const socket = await UdpProxySocket.open(context);
  cleanup.push(() => socket.close());
  void socket.proxyLoop(createServiceInfo(context));
  const client: UdpTestClient = await udpClient();
  cleanup.push(() => client.close());
  const ask = async (text: string): Promise<string> => {
    client.send(Buffer.from(text), socket.addr().port, '127.1.7.1');
    return (await client.next()).data.toString();
  };
  /** Replaces the endpoints, tells the socket as the Proxier would, and lets its sweep run. */
  const change = async (list: string[]): Promise<void> => {
    const next = endpointsOf(list);
    lb.onEndpointsUpdate(current, next);
    current = next;
    context.notifyEndpointsChanged();
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { socket, ask, change };
}

describe('UdpProxySocket and endpoint changes', () => {
  it('ends a session whose endpoint left, and the next datagram reaches a live endpoint', async () => {
    const closed = recordChannel<UdpSessionCloseMessage>(CHANNELS.udpSessionClose, (fn) =>
      cleanup.push(fn),
    );
    const a = await echo('127.1.7.2', 'A:');
    const b = await echo('127.1.7.3', 'B:');
    const { socket, ask, change } = await setup([a.endpoint]);
    expect(await ask('1')).toBe('A:1');
    await change([b.endpoint]);
    expect(socket.sessionCount).toBe(0);
    expect(closed.map((m) => m.endpoint)).toEqual([a.endpoint]);
    expect(await ask('2')).toBe('B:2');
    expect(a.received.length).toBe(1);
  });

  it('keeps a session whose endpoint stays, on the same upstream socket', async () => {
    const a = await echo('127.1.7.4', 'A:');
    const b = await echo('127.1.7.5', 'B:');
    const { socket, ask, change } = await setup([a.endpoint]);
    expect(await ask('1')).toBe('A:1');
    await change([a.endpoint, b.endpoint]);
    expect(socket.sessionCount).toBe(1);
    expect(await ask('2')).toBe('A:2');
    // One upstream socket, one source port: the same session carried both datagrams.
    expect(new Set(a.received.map((r) => r.from)).size).toBe(1);
    expect(a.received.length).toBe(2);
  });

  it('ends every session when the port has no endpoints left', async () => {
    const a = await echo('127.1.7.6', 'A:');
    const { socket, ask, change } = await setup([a.endpoint]);
    expect(await ask('1')).toBe('A:1');
    await change([]);
    expect(socket.sessionCount).toBe(0);
  });
});
