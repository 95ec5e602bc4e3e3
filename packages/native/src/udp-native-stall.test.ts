import dgram from 'node:dgram';
import {
  createProxySocketFactory,
  type ProxySocket,
  servicePortNameString,
} from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import { startUdpEchoServer } from '../../core/src/test-support/echo-servers.js';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { type UdpTestClient, udpClient } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { withNativeUdp } from './index.js';
import { HAS_CC, proxyInTest, randomLoopback, useCleanup } from './test-support/native-tests.js';
import { pausableHelper } from './test-support/paused-node.js';
import { buildUdpRelayHelper } from './udp-protocol.js';
import type { NativeUdpProxySocket } from './udp-proxy-socket.js';

const cleanup = useCleanup();
const servicePort = { namespace: 'ns', name: 'dns', port: 'dns', protocol: 'UDP' as const };
const key = servicePortNameString(servicePort);

/** True once `c` got a reply to one of a few pings. */
async function replied(c: UdpTestClient, port: number, host: string): Promise<boolean> {
  c.send('ping', port, host);
  try {
    return (await c.next(100)).data.toString() === 'ping';
  } catch {
    return false;
  }
}

describe.skipIf(!HAS_CC)('the native UDP helper while Node does not read it', () => {
  it('keeps relaying established sessions, dropping new sources and counting them', async () => {
    const wrapper = pausableHelper(await buildUdpRelayHelper(), ['--out-max', '4096']);
    cleanup.push(() => wrapper.remove());
    const b = await startUdpEchoServer({ host: randomLoopback() });
    cleanup.push(() => b.close());
    const f = withNativeUdp(createProxySocketFactory(), {
      threads: 1,
      helperPath: wrapper.path,
      maxUdpSessions: 100_000,
      maxUdpSessionsPerSource: 100_000,
    });
    cleanup.push(() => f.close());
    const lb = new FakeLoadBalancer({ [key]: [b.endpoint] });
    const ctx = createSocketContext({
      loadBalancer: lb,
      protocol: 'UDP',
      ip: randomLoopback(),
      servicePort,
    });
    const socket = (await f(ctx)) as ProxySocket as NativeUdpProxySocket;
    proxyInTest(socket, ctx, fakeServiceInfo({ protocol: 'UDP' }), cleanup);
    const { address: host, port } = socket.addr();
    const c = await udpClient(randomLoopback());
    cleanup.push(() => c.close());
    await waitFor(() => replied(c, port, host), 5000, 'the session is established');
    const flood: dgram.Socket[] = [];
    cleanup.push(() => {
      for (const s of flood) s.close();
    });
    const floodHost = randomLoopback();
    for (let i = 0; i < 2500; i++) {
      const s = dgram.createSocket('udp4');
      s.on('error', () => undefined);
      await new Promise<void>((r) => s.bind(0, floodHost, r));
      flood.push(s);
    }
    wrapper.pause(f.helperPid() as number);
    cleanup.push(() => wrapper.resume());
    // Every new source is reported to Node: 2 500 frames fill the pipe and the helper's buffer.
    for (const s of flood) s.send('new', port, host);
    await waitFor(
      () => replied(c, port, host),
      5000,
      'the established session relays, Node paused',
    );
    wrapper.resume();
    await waitFor(() => f.counters.droppedQueueFull > 0, 5000, 'the new sources dropped, counted');
    expect(socket.sessionCount).toBeLessThan(2501);
    const late = await udpClient(randomLoopback());
    cleanup.push(() => late.close());
    await waitFor(() => replied(late, port, host), 5000, 'a new client is served once Node reads');
  }, 30_000);
});
