import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { defaultConfiguration } from './config-schema.js';
import { configzBody } from './configz.js';
import { ProxyMetrics } from './metrics.js';
import { createMetricsServer } from './metrics-server.js';
import { parseExposition, sampleValue } from './test-support/prom-text.js';

let server: Server | undefined;

afterEach(async () => {
  await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  server = undefined;
});

async function start(
  configz = () => configzBody(defaultConfiguration()),
): Promise<{ base: string; metrics: ProxyMetrics }> {
  const metrics = new ProxyMetrics({ defaultMetrics: false });
  server = createMetricsServer({
    registry: metrics.registry,
    proxyMode: 'service-port-portal',
    configz,
  });
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, metrics };
}

describe('metrics server', () => {
  it('serves /metrics in the Prometheus text format', async () => {
    const { base, metrics } = await start();
    metrics.healthzResponse(200);
    const res = await fetch(`${base}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    const m = parseExposition(await res.text());
    expect(sampleValue(m, 'kubeproxy_proxy_healthz_total', { code: '200' })).toBe(1);
  });

  it('serves the generic /healthz check', async () => {
    const { base } = await start();
    const plain = await fetch(`${base}/healthz`);
    expect(plain.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(await plain.text()).toBe('ok');
    expect(await (await fetch(`${base}/healthz/ping`)).text()).toBe('ok');
    expect(await (await fetch(`${base}/healthz?verbose`)).text()).toBe(
      '[+]ping ok\nhealthz check passed\n',
    );
    expect(await (await fetch(`${base}/healthz?verbose&exclude=ping&exclude=etcd`)).text()).toBe(
      '[+]ping excluded: ok\nwarn: some health checks cannot be excluded: no matches for "etcd"\nhealthz check passed\n',
    );
  });

  it('serves /proxyMode without a newline', async () => {
    const { base } = await start();
    const res = await fetch(`${base}/proxyMode`);
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(await res.text()).toBe('service-port-portal');
  });

  it('serves /configz with Go field names and Go durations', async () => {
    const { base } = await start();
    const res = await fetch(`${base}/configz`);
    expect(res.headers.get('content-type')).toBe('application/json');
    const body = (await res.json()) as Record<string, Record<string, unknown>>;
    const config = body['kubeproxy.config.k8s.io'];
    expect(config).toMatchObject({
      BindAddress: '0.0.0.0',
      HealthzBindAddress: '0.0.0.0:10256',
      MetricsBindAddress: '127.0.0.1:10249',
      ClientConnection: { QPS: 5, Burst: 10, ContentType: 'application/vnd.kubernetes.protobuf' },
      IPTables: { MasqueradeBit: 14, SyncPeriod: '30s', MinSyncPeriod: '1s' },
      ConfigSyncPeriod: '15m0s',
      UDPIdleTimeout: '10s',
      OOMScoreAdj: -999,
      Logging: { format: 'text', verbosity: 0 },
      UserspaceProxy: {
        DrainTimeout: '25s',
        DialTimeouts: ['250ms', '500ms', '1s', '2s'],
        MaxUDPSessionsPerPort: 4096,
        NodeWaitTimeout: '30s',
      },
    });
    expect(config).not.toHaveProperty('apiVersion');
  });

  it('answers 500 when /configz cannot be rendered, and 404 elsewhere', async () => {
    const { base } = await start(() => {
      throw new Error('cycle');
    });
    const res = await fetch(`${base}/configz`);
    expect(res.status).toBe(500);
    expect(await res.text()).toBe('error marshaling json: cycle');
    const missing = await fetch(`${base}/livez`);
    expect(missing.status).toBe(404);
    expect(await missing.text()).toBe('404 page not found\n');
  });
});
