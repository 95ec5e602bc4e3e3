import { createProxySocketFactory } from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import { startUdpEchoServer } from '../../core/src/test-support/echo-servers.js';
import { udpClient } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { withNativeTcp, withNativeUdp } from './index.js';
import {
  HAS_CC,
  randomLoopback,
  serviceAt,
  sliceOf,
  startProxier,
  useCleanup,
} from './test-support/native-tests.js';

const cleanup = useCleanup();
const dns = { name: 'dns', portName: 'dns', port: 5353, protocol: 'UDP' } as const;
const service = (ip: string) => serviceAt(dns, ip);
const slice = (ips: string[], port: number) => sliceOf(dns, ips, port);

describe.skipIf(!HAS_CC)('a Proxier with withNativeUdp', () => {
  it('serves a UDP Service in service-port-portal mode through the helper, end to end', async () => {
    const port = 20_000 + Math.floor(Math.random() * 20_000);
    const a = await startUdpEchoServer({ host: randomLoopback(), port, prefix: 'a:' });
    const b = await startUdpEchoServer({ host: randomLoopback(), port, prefix: 'b:' });
    cleanup.push(
      () => a.close(),
      () => b.close(),
    );
    // Composed with the TCP helper: each protocol goes to its own.
    const tcp = withNativeTcp(createProxySocketFactory(), { threads: 2 });
    const factory = withNativeUdp(tcp, { threads: 2 });
    cleanup.push(
      () => factory.close(),
      () => tcp.close(),
    );
    const proxier = await startProxier(factory, cleanup);
    const ip = randomLoopback();
    proxier.onServiceAdd(service(ip));
    proxier.onEndpointSliceAdd(slice([a.host, b.host], port));
    const svcPort = { namespace: 'ns', name: 'dns', port: 'dns', protocol: 'UDP' as const };
    const info = await waitFor(() => proxier.getServiceInfo(svcPort), 5000, 'the Service served');
    expect(factory.helperPid()).toBeDefined();
    expect(tcp.helperPid()).toBeUndefined();
    const seen = new Set<string>();
    for (let i = 0; i < 8; i++) {
      const c = await udpClient(randomLoopback());
      cleanup.push(() => c.close());
      const reply = await waitFor(
        async () => {
          c.send(`q${i}`, 5353, ip);
          try {
            return (await c.next(300)).data.toString();
          } catch {
            return undefined;
          }
        },
        5000,
        `client ${i} answered`,
      );
      expect(reply.slice(2)).toBe(`q${i}`);
      seen.add(reply.slice(0, 2));
    }
    expect(seen).toEqual(new Set(['a:', 'b:']));
    expect(info.activeClients.size).toBe(8);
    // The Proxier's round-robin balancer, no affinity: most sessions took picks made ahead.
    expect(factory.counters.sessionsAhead).toBeGreaterThanOrEqual(6);
    // The Service goes away: its socket closes, and with it the last user of the helper.
    proxier.onServiceDelete(service(ip));
    await waitFor(() => factory.helperPid() === undefined, 5000, 'the helper stopped when unused');
  });
});
