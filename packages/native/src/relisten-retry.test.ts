import dgram from 'node:dgram';
import net from 'node:net';
import {
  createProxySocketFactory,
  type ProxySocket,
  servicePortNameString,
} from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import { startTcpServer, startUdpEchoServer } from '../../core/src/test-support/echo-servers.js';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { connectTcp, readToEnd, udpClient } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { withNativeTcp, withNativeUdp } from './index.js';
import { HAS_CC, proxyInTest, randomLoopback, useCleanup } from './test-support/native-tests.js';

const cleanup = useCleanup();

/** Opens `protocol`'s socket of one Service through factory `f`, proxied. */
async function open(
  f: ReturnType<typeof withNativeTcp> | ReturnType<typeof withNativeUdp>,
  protocol: 'TCP' | 'UDP',
  endpoint: string,
): Promise<{ host: string; port: number }> {
  const servicePort = { namespace: 'ns', name: 'svc', port: 'p', protocol };
  const lb = new FakeLoadBalancer({ [servicePortNameString(servicePort)]: [endpoint] });
  const ctx = createSocketContext({
    loadBalancer: lb,
    protocol,
    ip: randomLoopback(),
    servicePort,
  });
  const socket: ProxySocket = await f(ctx);
  proxyInTest(socket, ctx, fakeServiceInfo({ protocol }), cleanup);
  return { host: socket.addr().address, port: socket.addr().port };
}

describe.skipIf(!HAS_CC)('listening again after a helper restart', () => {
  it('retries a TCP port another socket held across the restart, and serves it again', async () => {
    const b = await startTcpServer({ host: randomLoopback() });
    cleanup.push(() => b.close());
    const f = withNativeTcp(createProxySocketFactory(), { threads: 1, restartBackoffMs: 300 });
    cleanup.push(() => f.close());
    const { host, port } = await open(f, 'TCP', b.endpoint);
    process.kill(f.helperPid() as number, 'SIGKILL');
    await waitFor(() => f.counters.helperExits === 1, 5000, 'the helper died');
    const thief = net.createServer();
    await new Promise<void>((r) => thief.listen(port, host, r));
    await waitFor(() => f.counters.relistenFailures >= 1, 5000, 'the listen failed');
    await new Promise((r) => thief.close(r));
    await waitFor(
      async () => {
        try {
          const c = await connectTcp(port, host);
          const got = readToEnd(c);
          c.end('back');
          return (await got).data.toString() === 'back';
        } catch {
          return false;
        }
      },
      10_000,
      'served again once the port is free',
    );
    expect(f.counters.helperStarts).toBe(2);
  }, 20_000);

  it('retries a UDP port another socket held across the restart, and serves it again', async () => {
    const b = await startUdpEchoServer({ host: randomLoopback() });
    cleanup.push(() => b.close());
    const f = withNativeUdp(createProxySocketFactory(), { threads: 1, restartBackoffMs: 300 });
    cleanup.push(() => f.close());
    const { host, port } = await open(f, 'UDP', b.endpoint);
    process.kill(f.helperPid() as number, 'SIGKILL');
    await waitFor(() => f.counters.helperExits === 1, 5000, 'the helper died');
    const thief = dgram.createSocket('udp4');
    await new Promise<void>((r) => thief.bind(port, host, r));
    await waitFor(() => f.counters.relistenFailures >= 1, 5000, 'the bind failed');
    await new Promise<void>((r) => thief.close(r));
    const c = await udpClient(randomLoopback());
    cleanup.push(() => c.close());
    await waitFor(
      async () => {
        c.send('back', port, host);
        try {
          return (await c.next(200)).data.toString() === 'back';
        } catch {
          return false;
        }
      },
      10_000,
      'served again once the port is free',
    );
  }, 20_000);
});
