import { createProxySocketFactory, RoundRobinLoadBalancer } from '@userspace-proxy/core';
import { CHANNELS, type ConnectionCloseMessage } from '@userspace-proxy/core/diagnostics';
import { createServiceInfo, createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import { startTcpServer } from '../../core/src/test-support/echo-servers.js';
import { recordChannel } from '../../core/src/test-support/record-channel.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { type NativeTcpFactory, withNativeTcp } from './index.js';
import type { NativeTcpProxySocket } from './proxy-socket-native.js';
import { buildRelayHelper } from './relay-protocol.js';
import {
  HAS_CC,
  helloThrough,
  oneEndpoint,
  picksSettled,
  proxyInTest,
  randomLoopback,
  useCleanup,
} from './test-support/native-tests.js';
import { pausableHelper } from './test-support/paused-node.js';

// The helper's lazy frames: the 'a', 'd' and 'c' of a connection dialled from a pick made ahead
// need nothing from Node, so a helper thread keeps them (1 ms by default) to write several
// connections' frames at once; any frame Node must act on takes them along at once.
const cleanup = useCleanup();

/** A Service `name` on the factory `f`, its one endpoint an echo server; `hello` is one connection. */
async function service(f: NativeTcpFactory, name: string, affinity: 'None' | 'ClientIP') {
  const backend = await startTcpServer({ host: randomLoopback() });
  cleanup.push(() => backend.close());
  const servicePort = { namespace: 'ns', name, port: 'p', protocol: 'TCP' as const };
  const lb = new RoundRobinLoadBalancer();
  lb.newService(servicePort, affinity, 0);
  lb.onEndpointsAdd(oneEndpoint(name, 'p', backend.endpoint));
  const ctx = createSocketContext({
    loadBalancer: lb,
    protocol: 'TCP',
    ip: randomLoopback(),
    servicePort,
  });
  const socket = (await f(ctx)) as NativeTcpProxySocket;
  proxyInTest(socket, ctx, createServiceInfo(ctx, { sessionAffinityType: affinity }), cleanup);
  const hello = (): Promise<string> => helloThrough(socket);
  return { socket, hello };
}

function recordCloses(): ConnectionCloseMessage[] {
  return recordChannel<ConnectionCloseMessage>(CHANNELS.connectionClose, (fn) => cleanup.push(fn));
}

describe.skipIf(!HAS_CC)('the native TCP helper’s lazy frames', () => {
  it('holds a picked connection’s frames until one Node must act on, then sends both in order', async () => {
    // One thread (lazy frames are per thread), and frames kept for up to a minute.
    const wrapper = pausableHelper(await buildRelayHelper(), ['--lazy-us', '60000000']);
    cleanup.push(() => wrapper.remove());
    const f = withNativeTcp(createProxySocketFactory(), { threads: 1, helperPath: wrapper.path });
    cleanup.push(() => f.close());
    const closes = recordCloses();
    const ahead = await service(f, 'ahead', 'None');
    const perAccept = await service(f, 'client-ip', 'ClientIP');
    await waitFor(() => picksSettled(ahead.socket), 5000);

    expect(await ahead.hello()).toBe('hi');
    await new Promise((r) => setTimeout(r, 300));
    // Relayed and closed in the helper; Node has heard nothing of it yet.
    expect(f.counters.accepted).toBe(0);
    expect(closes).toHaveLength(0);

    // A ClientIP connection's 'a' asks Node for its dial: written at once, the held frames first.
    expect(await perAccept.hello()).toBe('hi');
    await waitFor(() => closes.length === 2, 5000);
    expect(f.counters.accepted).toBe(2);
    expect(f.counters.dialsAhead).toBe(1);
    expect(f.counters.dialsAsked).toBe(1);
    expect(closes.map((m) => [m.service.includes('client-ip'), m.bytesIn, m.bytesOut])).toEqual([
      [false, 2, 2],
      [true, 2, 2],
    ]);
  });

  it('sends them within milliseconds when nothing else comes', async () => {
    const f = withNativeTcp(createProxySocketFactory(), { threads: 1 });
    cleanup.push(() => f.close());
    const closes = recordCloses();
    const ahead = await service(f, 'alone', 'None');
    await waitFor(() => picksSettled(ahead.socket), 5000);
    expect(await ahead.hello()).toBe('hi');
    const t0 = Date.now();
    await waitFor(() => closes.length === 1, 5000);
    // The helper's own deadline (1 ms), not its once-a-second sweep or another event.
    expect(Date.now() - t0).toBeLessThan(500);
    expect(f.counters.accepted).toBe(1);
    expect(f.counters.dialsAhead).toBe(1);
  });
});
