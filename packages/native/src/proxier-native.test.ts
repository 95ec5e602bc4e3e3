import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  createProxySocketFactory,
  type EndpointSlice,
  newCustomProxier,
  type Service,
} from '@userspace-proxy/core';
import { afterEach, describe, expect, it } from 'vitest';
import { startTcpServer } from '../../core/src/test-support/echo-servers.js';
import { connectTcp, readToEnd } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { withNativeTcp } from './index.js';

/** The helper is compiled with the system C compiler (.ci/run installs gcc); without one these skip. */
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
    metadata: { namespace: 'ns', name: 'web' },
    spec: { clusterIP: ip, ports: [{ name: 'http', port: 8080, protocol: 'TCP' }] },
  };
}

function slice(ip: string, port: number): EndpointSlice {
  return {
    metadata: { namespace: 'ns', name: 'web-1', labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv4',
    endpoints: [{ addresses: [ip], conditions: { ready: true } }],
    ports: [{ name: 'http', port, protocol: 'TCP' }],
  };
}

describe.skipIf(!HAS_CC)('a Proxier with withNativeTcp', () => {
  it('serves a Service in service-port-portal mode through the helper, end to end', async () => {
    const b = await startTcpServer({ host: randomLoopback() });
    cleanup.push(() => b.close());
    const factory = withNativeTcp(createProxySocketFactory(), { threads: 2 });
    cleanup.push(() => factory.close());
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
    proxier.onEndpointSliceAdd(slice(b.host, b.port));
    const svcPort = { namespace: 'ns', name: 'web', port: 'http', protocol: 'TCP' as const };
    await waitFor(() => proxier.getServiceInfo(svcPort), 5000, 'the Service served');
    expect(factory.helperPid()).toBeDefined();
    const payload = randomBytes(1 << 20);
    const c = await connectTcp(8080, ip);
    const got = readToEnd(c);
    c.end(payload);
    const { data, ended } = await got;
    expect(ended).toBe('end');
    expect(createHash('sha256').update(data).digest('hex')).toBe(
      createHash('sha256').update(payload).digest('hex'),
    );
    // The Proxier's round-robin balancer, no affinity: the later connections take picks made ahead.
    for (let i = 0; i < 10; i++) {
      const k = await connectTcp(8080, ip);
      const r = readToEnd(k);
      k.end('x');
      expect((await r).data.toString()).toBe('x');
    }
    expect(factory.counters.dialsAhead).toBeGreaterThanOrEqual(8);
    // The Service goes away: its listener closes, and with it the last user of the helper.
    proxier.onServiceDelete(service(ip));
    await waitFor(() => factory.helperPid() === undefined, 5000, 'the helper stopped when unused');
  });
});
