import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { createProxySocketFactory, RoundRobinLoadBalancer } from '@userspace-proxy/core';
import { createServiceInfo, createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import { startTcpServer } from '../../core/src/test-support/echo-servers.js';
import { connectTcp, readToEnd } from '../../core/src/test-support/net-clients.js';
import { type NativeTcpFactory, withNativeTcp } from './index.js';
import type { NativeTcpProxySocket } from './proxy-socket-native.js';
import {
  HAS_CC,
  oneEndpoint,
  PRLIMIT,
  proxyInTest,
  randomLoopbackNet,
  useCleanup,
} from './test-support/native-tests.js';

/**
 * Listening sockets against the descriptor limit: a socket per helper thread while they stay
 * within a quarter of it, one socket shared by every thread past it, so a daemon with thousands
 * of Services does not run out of descriptors before its first client.
 */
const cleanup = useCleanup();
/** This file's own /24. */
const NET = randomLoopbackNet();

describe.skipIf(!HAS_CC || !existsSync(PRLIMIT))('NativeTcpProxySocket listeners', () => {
  it('shares one socket among the threads past a quarter of the descriptor limit', async () => {
    const server = await startTcpServer({ host: `${NET}250` });
    cleanup.push(() => server.close());
    const lb = new RoundRobinLoadBalancer();
    const f: NativeTcpFactory = withNativeTcp(createProxySocketFactory(), { threads: 2 });
    cleanup.push(() => f.close());
    const open = async (i: number) => {
      const servicePort = {
        namespace: 'ns',
        name: `s${i}`,
        port: 'http',
        protocol: 'TCP' as const,
      };
      lb.newService(servicePort, 'None', 0);
      lb.onEndpointsAdd(oneEndpoint(`s${i}`, 'http', server.endpoint));
      const ctx = createSocketContext({
        loadBalancer: lb,
        protocol: 'TCP',
        ip: `${NET}${i + 1}`,
        servicePort,
      });
      const socket = (await f(ctx)) as NativeTcpProxySocket;
      proxyInTest(socket, ctx, createServiceInfo(ctx, { sessionAffinityType: 'None' }), cleanup);
      return socket.addr();
    };
    const first = await open(0);
    const pid = f.helperPid();
    expect(pid).toBeDefined();
    // 64 descriptors: 16 for listening sockets, 8 listeners' worth on two threads.
    expect(spawnSync(PRLIMIT, [`--pid=${pid}`, '--nofile=64:64']).status).toBe(0);
    const addrs = [first];
    // 40 listeners: a socket per thread for each would be 80 descriptors, over the limit.
    for (let i = 1; i < 40; i++) addrs.push(await open(i));
    const fds = readdirSync(`/proc/${pid}/fd`).length;
    expect(fds).toBeLessThan(64);
    for (const { address, port } of addrs) {
      const c = await connectTcp(port, address);
      const done = readToEnd(c);
      c.end('hi');
      expect((await done).data.toString()).toBe('hi');
    }
  });

  it('resolves every close() of its factory, however many come before the helper exits', async () => {
    const f: NativeTcpFactory = withNativeTcp(createProxySocketFactory(), { threads: 1 });
    const servicePort = { namespace: 'ns', name: 'c', port: 'http', protocol: 'TCP' as const };
    const ctx = createSocketContext({
      loadBalancer: new RoundRobinLoadBalancer(),
      protocol: 'TCP',
      ip: `${NET}200`,
      servicePort,
    });
    const socket = await f(ctx);
    expect(f.helperPid()).toBeDefined();
    await Promise.all([f.close(), f.close(), socket.close()]);
    expect(f.helperPid()).toBeUndefined();
  });
});
