import {
  type AcceptedConnection,
  type AcceptPolicy,
  createProxySocketFactory,
  servicePortNameString,
} from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import { startTcpServer } from '../../core/src/test-support/echo-servers.js';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { connectTcp, readBytes } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { withNativeTcp } from './index.js';
import { HAS_CC, randomLoopback as loopback, useCleanup } from './test-support/native-tests.js';

// Node's command frames go out once per event-loop turn and pipe (setImmediate), not once per
// nextTick: the hand-over's dials, asked from several callbacks of one turn, are one write.

const servicePort = { namespace: 'ns', name: 'batch', port: 'p', protocol: 'TCP' as const };
const KEY = servicePortNameString(servicePort);
const cleanup = useCleanup();

// Skipped only where no C compiler exists: the helper under test is built from C at test time.
describe.skipIf(!HAS_CC)('NativeTcpProxySocket command frames', () => {
  it('writes the dials asked from several callbacks of one turn in one write', async () => {
    const backend = await startTcpServer({ host: loopback() });
    cleanup.push(() => backend.close());
    const seen: AcceptedConnection[] = [];
    const policy: AcceptPolicy = {
      accept: (c) => {
        seen.push(c);
        return 'hold';
      },
    };
    const native = withNativeTcp(createProxySocketFactory(), { threads: 1 });
    cleanup.push(() => native.close());
    const lb = new FakeLoadBalancer({ [KEY]: [] });
    const context = createSocketContext({ loadBalancer: lb, ip: loopback(), servicePort });
    const socket = await native.withAcceptPolicy(() => policy)(context);
    cleanup.push(() => socket.close());
    void socket.proxyLoop(fakeServiceInfo());
    const clients = [];
    for (let i = 0; i < 6; i++) {
      const c = await connectTcp(socket.addr().port, socket.addr().address);
      c.on('error', () => {});
      cleanup.push(() => c.destroy());
      c.write(`c${i}`);
      clients.push(c);
    }
    await waitFor(
      () => seen.length === 6 && seen.every((c) => c.heldBytes === 2),
      5_000,
      'six held',
    );
    lb.setEndpoints(KEY, [backend.endpoint]);
    const before = native.counters.commandWrites;
    const dialsBefore = native.counters.dialsAsked;
    // Two callbacks of the same check phase, three hand-overs each: with a flush per nextTick
    // this was two writes.
    setImmediate(() => {
      for (const c of seen.slice(0, 3)) c.proxy();
    });
    setImmediate(() => {
      for (const c of seen.slice(3)) c.proxy();
    });
    await waitFor(() => seen.every((c) => c.state === 'relaying'), 5_000, 'all relaying');
    expect(native.counters.dialsAsked - dialsBefore).toBe(6);
    expect(native.counters.commandWrites - before).toBe(1);
    // And the frames were whole: every client reaches the echo backend.
    for (const [i, c] of clients.entries())
      expect((await readBytes(c, 2)).toString()).toBe(`c${i}`);
  });
});
