import net from 'node:net';
import { createProxySocketFactory, servicePortNameString } from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, it } from 'vitest';
import { startTcpServer } from '../../core/src/test-support/echo-servers.js';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { connectTcp } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { withNativeTcp } from './index.js';
import { buildRelayHelper } from './relay-protocol.js';
import { HAS_CC, proxyInTest, randomLoopback, useCleanup } from './test-support/native-tests.js';
import { pausableHelper } from './test-support/paused-node.js';

const cleanup = useCleanup();
const servicePort = { namespace: 'ns', name: 'web', port: 'http', protocol: 'TCP' as const };
const key = servicePortNameString(servicePort);

/** True once `c` echoed a ping back within 200 ms. */
async function echoed(c: net.Socket): Promise<boolean> {
  const got = new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => {
      c.off('data', on);
      resolve(false);
    }, 200);
    const on = (): void => {
      clearTimeout(timer);
      c.off('data', on);
      resolve(true);
    };
    c.on('data', on);
  });
  c.write('ping');
  return got;
}

describe.skipIf(!HAS_CC)('the native TCP helper while Node does not read it', () => {
  it('keeps relaying established connections, new clients waiting in the backlog', async () => {
    const wrapper = pausableHelper(await buildRelayHelper(), ['--out-max', '4096']);
    cleanup.push(() => wrapper.remove());
    const b = await startTcpServer({ host: randomLoopback() });
    cleanup.push(() => b.close());
    const f = withNativeTcp(createProxySocketFactory(), { threads: 1, helperPath: wrapper.path });
    cleanup.push(() => f.close());
    const lb = new FakeLoadBalancer({ [key]: [b.endpoint] });
    const ctx = createSocketContext({
      loadBalancer: lb,
      protocol: 'TCP',
      ip: randomLoopback(),
      servicePort,
    });
    const socket = await f(ctx);
    proxyInTest(socket, ctx, fakeServiceInfo(), cleanup);
    const { address: host, port } = socket.addr();
    const c = await connectTcp(port, host);
    cleanup.push(() => c.destroy());
    await waitFor(() => echoed(c), 5000, 'the connection relays');
    wrapper.pause(f.helperPid() as number);
    cleanup.push(() => wrapper.resume());
    // Every accept is reported to Node: 2 000 of them fill the pipe and the helper's buffer.
    const flood: net.Socket[] = [];
    cleanup.push(() => {
      for (const s of flood) s.destroy();
    });
    const floodHost = randomLoopback();
    for (let i = 0; i < 2000; i++) {
      const s = net.connect({ port, host, localAddress: floodHost });
      s.on('error', () => undefined);
      flood.push(s);
    }
    await waitFor(() => echoed(c), 10_000, 'the established connection relays, Node paused');
    wrapper.resume();
    const late = await connectTcp(port, host);
    cleanup.push(() => late.destroy());
    await waitFor(() => echoed(late), 10_000, 'a new client is served once Node reads');
  }, 60_000);
});
