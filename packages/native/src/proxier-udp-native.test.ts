import { spawnSync } from 'node:child_process';
import {
  createProxySocketFactory,
  type EndpointSlice,
  newCustomProxier,
  type Service,
} from '@userspace-proxy/core';
import { afterEach, describe, expect, it } from 'vitest';
import { startUdpEchoServer } from '../../core/src/test-support/echo-servers.js';
import { udpClient } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { withNativeTcp, withNativeUdp } from './index.js';

/** The helpers are compiled with the system C compiler (.ci/run installs gcc); without one these skip. */
const HAS_CC = spawnSync('cc', ['--version']).status === 0;

const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

function randomLoopback(): string {
  const r = (): number => 1 + Math.floor(Math.random() * 254);
  return `127.${r()}.${r()}.${r()}`;
}

function service(ip: string): Service {
  return {
    metadata: { namespace: 'ns', name: 'dns' },
    spec: { clusterIP: ip, ports: [{ name: 'dns', port: 5353, protocol: 'UDP' }] },
  };
}

function slice(ips: string[], port: number): EndpointSlice {
  return {
    metadata: { namespace: 'ns', name: 'dns-1', labels: { 'kubernetes.io/service-name': 'dns' } },
    addressType: 'IPv4',
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } })),
    ports: [{ name: 'dns', port, protocol: 'UDP' }],
  };
}

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
    const proxier = await newCustomProxier(
      {
        mode: 'service-port-portal',
        minSyncPeriodMs: 5,
        syncPeriodMs: 1000,
        nodePortAddresses: [],
      },
      factory,
    );
    const stop = new AbortController();
    const loop = proxier.syncLoop(stop.signal);
    cleanup.push(async () => {
      stop.abort();
      await loop;
      await proxier.shutdown();
    });
    proxier.onServiceSynced();
    proxier.onEndpointSlicesSynced();
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
