import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import {
  createProxySocketFactory,
  type ProxySocket,
  RoundRobinLoadBalancer,
} from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import { startUdpEchoServer } from '../../core/src/test-support/echo-servers.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { udpClient } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { type NativeUdpFactory, withNativeUdp } from './index.js';
import {
  HAS_CC,
  oneEndpoint,
  PRLIMIT,
  picksSettled,
  proxyInTest,
  randomLoopbackNet,
  useCleanup,
} from './test-support/native-tests.js';
import type { NativeUdpProxySocket } from './udp-proxy-socket.js';

/**
 * UDP listener sockets against the descriptor limit: a socket per helper thread while they stay
 * within a quarter of it; past it one socket, served by one thread, so a daemon with thousands of
 * UDP Services does not run out of descriptors before its first client.
 */
const cleanup = useCleanup();
/** This file's own /24. */
const NET = randomLoopbackNet();

describe.skipIf(!HAS_CC || !existsSync(PRLIMIT))('NativeUdpProxySocket listeners', () => {
  it('serves a listener from one thread past a quarter of the descriptor limit', async () => {
    const server = await startUdpEchoServer({ host: `${NET}250` });
    cleanup.push(() => server.close());
    const lb = new RoundRobinLoadBalancer();
    const f: NativeUdpFactory = withNativeUdp(createProxySocketFactory(), { threads: 2 });
    cleanup.push(() => f.close());
    const open = async (i: number): Promise<NativeUdpProxySocket> => {
      const servicePort = { namespace: 'ns', name: `u${i}`, port: 'dns', protocol: 'UDP' as const };
      lb.newService(servicePort, 'None', 0);
      lb.onEndpointsAdd(oneEndpoint(`u${i}`, 'dns', server.endpoint));
      const ctx = createSocketContext({
        loadBalancer: lb,
        protocol: 'UDP',
        ip: `${NET}${i + 1}`,
        servicePort,
      });
      const socket = (await f(ctx)) as ProxySocket as NativeUdpProxySocket;
      proxyInTest(socket, ctx, fakeServiceInfo({ protocol: 'UDP' }), cleanup);
      return socket;
    };
    const sockets = [await open(0)];
    const pid = f.helperPid();
    expect(pid).toBeDefined();
    // 64 descriptors: 16 for listener sockets, 7 listeners' worth on two threads (the hard limit
    // stays, so the soft one can be raised again below).
    expect(spawnSync(PRLIMIT, [`--pid=${pid}`, '--nofile=64:1024']).status).toBe(0);
    // 36 listeners: a socket per thread for each would be 72 descriptors, over the limit.
    for (let i = 1; i < 36; i++) sockets.push(await open(i));
    expect(readdirSync(`/proc/${pid}/fd`).length).toBeLessThan(64);
    // Room again for the sessions' upstream sockets: the listeners bound under the limit.
    expect(spawnSync(PRLIMIT, [`--pid=${pid}`, '--nofile=1024:1024']).status).toBe(0);
    // Every thread acknowledges the picks of every listener, served by it or not.
    await waitFor(() => sockets.every((s) => picksSettled(s)), 5000);
    for (const socket of sockets) {
      const { address, port } = socket.addr();
      // Three clients each: every one of a listener's sessions lives on the thread serving it.
      for (let k = 0; k < 3; k++) {
        const c = await udpClient(`${NET}${240 + k}`);
        try {
          c.send(`ping ${k}`, port, address);
          const r = await c.next(5000);
          expect(r.data.toString()).toBe(`ping ${k}`);
          expect(r.from.port).toBe(port);
          c.send(`again ${k}`, port, address);
          expect((await c.next(5000)).data.toString()).toBe(`again ${k}`);
        } finally {
          await c.close();
        }
      }
    }
    expect(f.counters.sessionsAhead + f.counters.sessionsAsked).toBe(3 * sockets.length);
  });
});
