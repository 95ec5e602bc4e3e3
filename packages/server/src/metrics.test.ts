import diagnosticsChannel from 'node:diagnostics_channel';
import { CHANNELS } from '@userspace-proxy/core/diagnostics';
import { afterEach, describe, expect, it } from 'vitest';
import { LAST_CHANGE_TRIGGER_TIME, ProxyMetrics } from './metrics.js';
import { parseExposition, sampleValue } from './test-support/prom-text.js';

const publish = (name: string, message: unknown) =>
  diagnosticsChannel.channel(name).publish(message);
const web = { service: 'default/web:http', protocol: 'TCP' as const };
let unsubscribe: (() => void) | undefined;

afterEach(() => {
  unsubscribe?.();
  unsubscribe = undefined;
});

function setup(now = 1_700_000_000_000) {
  const clock = { now: () => now };
  const metrics = new ProxyMetrics({ clock, defaultMetrics: false });
  unsubscribe = metrics.subscribe();
  return { metrics, scrape: async () => parseExposition(await metrics.registry.metrics()) };
}

describe('ProxyMetrics', () => {
  it('exposes kube-proxy’s sync metrics with their names, help and buckets', async () => {
    const { scrape } = setup();
    publish(CHANNELS.serviceChange, { service: 'default/web' });
    publish(CHANNELS.serviceChange, { service: 'default/db' });
    publish(CHANNELS.serviceChange, { service: 'default/web' });
    let m = await scrape();
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_service_changes_total')).toBe(3);
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_service_changes_pending')).toBe(2);
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds')).toBe(
      1_700_000_000,
    );
    publish(CHANNELS.sync, { durationMs: 3, changes: 2, servicePorts: 5 });
    m = await scrape();
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_service_changes_pending')).toBe(0);
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds')).toBe(1_700_000_000);
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_duration_seconds_count')).toBe(1);
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_duration_seconds_sum')).toBeCloseTo(0.003);
    expect(
      sampleValue(m, 'kubeproxy_sync_proxy_rules_duration_seconds_bucket', { le: '0.002' }),
    ).toBe(0);
    expect(
      sampleValue(m, 'kubeproxy_sync_proxy_rules_duration_seconds_bucket', { le: '0.004' }),
    ).toBe(1);
    expect(
      sampleValue(m, 'kubeproxy_sync_proxy_rules_duration_seconds_bucket', { le: '16.384' }),
    ).toBe(1);
    expect(sampleValue(m, 'userspace_proxy_service_ports')).toBe(5);
    expect(m.help.get('kubeproxy_sync_proxy_rules_duration_seconds')).toBe(
      '[ALPHA] SyncProxyRules latency in seconds',
    );
    expect(m.help.get('kubeproxy_sync_proxy_rules_last_timestamp_seconds')).toBe(
      '[ALPHA] The last time proxy rules were successfully synced',
    );
    expect(m.type.get('kubeproxy_sync_proxy_rules_duration_seconds')).toBe('histogram');
  });

  it('counts connections, bytes, dial failures, refusals, UDP sessions and accept errors per Service port', async () => {
    const { scrape } = setup();
    publish(CHANNELS.connectionOpen, { ...web, client: '127.0.0.1:5000', endpoint: '10.0.0.1:80' });
    publish(CHANNELS.connectionOpen, { ...web, client: '127.0.0.1:5001', endpoint: '10.0.0.1:80' });
    publish(CHANNELS.connectionClose, {
      ...web,
      endpoint: '10.0.0.1:80',
      bytesIn: 100,
      bytesOut: 2000,
      durationMs: 1500,
    });
    publish(CHANNELS.dialError, {
      ...web,
      endpoint: '10.0.0.2:80',
      error: new Error('ECONNREFUSED'),
    });
    publish(CHANNELS.refused, { ...web, reason: 'connection-limit' });
    const dns = { service: 'kube-system/dns:dns', protocol: 'UDP' as const };
    publish(CHANNELS.udpSessionOpen, { ...dns, client: '127.0.0.1:6000', endpoint: '10.0.0.3:53' });
    publish(CHANNELS.udpSessionClose, {
      ...dns,
      client: '127.0.0.1:6000',
      endpoint: '10.0.0.3:53',
      datagramsIn: 1,
      datagramsOut: 1,
      bytesIn: 40,
      bytesOut: 90,
    });
    publish(CHANNELS.refused, { ...dns, reason: 'udp-session-limit' });
    publish(CHANNELS.acceptError, { ...web, error: new Error('EMFILE') });
    publish(CHANNELS.objectRejected, { kind: 'Service', key: 'default/bad', reason: 'no ports' });
    const m = await scrape();
    expect(sampleValue(m, 'userspace_proxy_connections_total', web)).toBe(2);
    expect(sampleValue(m, 'userspace_proxy_connections_active', web)).toBe(1);
    expect(sampleValue(m, 'userspace_proxy_connection_duration_seconds_count', web)).toBe(1);
    expect(
      sampleValue(m, 'userspace_proxy_bytes_total', { ...web, direction: 'to_endpoint' }),
    ).toBe(100);
    expect(sampleValue(m, 'userspace_proxy_bytes_total', { ...web, direction: 'to_client' })).toBe(
      2000,
    );
    expect(sampleValue(m, 'userspace_proxy_dial_failures_total', web)).toBe(1);
    expect(
      sampleValue(m, 'userspace_proxy_refused_total', { ...web, reason: 'connection-limit' }),
    ).toBe(1);
    expect(sampleValue(m, 'userspace_proxy_udp_sessions_total', dns)).toBe(1);
    expect(sampleValue(m, 'userspace_proxy_udp_sessions_active', dns)).toBe(0);
    expect(sampleValue(m, 'userspace_proxy_bytes_total', { ...dns, direction: 'to_client' })).toBe(
      90,
    );
    expect(
      sampleValue(m, 'userspace_proxy_refused_total', { ...dns, reason: 'udp-session-limit' }),
    ).toBe(1);
    expect(sampleValue(m, 'userspace_proxy_accept_errors_total', web)).toBe(1);
    expect(sampleValue(m, 'userspace_proxy_objects_rejected_total', { kind: 'Service' })).toBe(1);
  });

  it('counts health responses and manifest reloads', async () => {
    const { metrics, scrape } = setup();
    metrics.healthzResponse(200);
    metrics.healthzResponse(503);
    metrics.healthzResponse(200);
    metrics.livezResponse(200);
    metrics.manifestReloaded('applied');
    metrics.manifestReloaded('rejected');
    const m = await scrape();
    expect(sampleValue(m, 'kubeproxy_proxy_healthz_total', { code: '200' })).toBe(2);
    expect(sampleValue(m, 'kubeproxy_proxy_healthz_total', { code: '503' })).toBe(1);
    expect(sampleValue(m, 'kubeproxy_proxy_livez_total', { code: '200' })).toBe(1);
    expect(m.help.get('kubeproxy_proxy_healthz_total')).toBe(
      '[ALPHA] Cumulative proxy healthz HTTP status',
    );
    expect(sampleValue(m, 'userspace_proxy_manifest_reloads_total', { result: 'applied' })).toBe(1);
    expect(sampleValue(m, 'userspace_proxy_manifest_reloads_total', { result: 'rejected' })).toBe(
      1,
    );
  });

  it('counts endpoint changes and observes the programming latency from the trigger time', async () => {
    const now = Date.parse('2024-01-01T00:00:10Z');
    const { metrics, scrape } = setup(now);
    metrics.endpointChanged({
      metadata: {
        name: 'web',
        annotations: { [LAST_CHANGE_TRIGGER_TIME]: '2024-01-01T00:00:07Z' },
      },
      addressType: 'IPv4',
      endpoints: [],
    });
    metrics.endpointChanged({ metadata: { name: 'db' } });
    const m = await scrape();
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_endpoint_changes_total')).toBe(2);
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_endpoint_changes_pending')).toBe(0);
    expect(sampleValue(m, 'kubeproxy_network_programming_duration_seconds_count')).toBe(1);
    expect(sampleValue(m, 'kubeproxy_network_programming_duration_seconds_sum')).toBe(3);
    expect(
      sampleValue(m, 'kubeproxy_network_programming_duration_seconds_bucket', { le: '3' }),
    ).toBe(1);
    expect(
      sampleValue(m, 'kubeproxy_network_programming_duration_seconds_bucket', { le: '2' }),
    ).toBe(0);
  });

  it('drops the series of Services that are gone, but not while they have open connections', async () => {
    const { metrics, scrape } = setup();
    const db = { service: 'default/db:pg', protocol: 'TCP' as const };
    publish(CHANNELS.connectionOpen, { ...web, client: 'c', endpoint: 'e' });
    publish(CHANNELS.connectionOpen, { ...db, client: 'c', endpoint: 'e' });
    publish(CHANNELS.connectionClose, {
      ...db,
      endpoint: 'e',
      bytesIn: 1,
      bytesOut: 1,
      durationMs: 1,
    });
    metrics.prune(new Set());
    let m = await scrape();
    expect(sampleValue(m, 'userspace_proxy_connections_total', web)).toBe(1);
    expect(sampleValue(m, 'userspace_proxy_connections_total', db)).toBeUndefined();
    expect(
      sampleValue(m, 'userspace_proxy_bytes_total', { ...db, direction: 'to_client' }),
    ).toBeUndefined();
    publish(CHANNELS.connectionClose, {
      ...web,
      endpoint: 'e',
      bytesIn: 1,
      bytesOut: 1,
      durationMs: 1,
    });
    metrics.prune(new Set(['default/web']));
    m = await scrape();
    expect(sampleValue(m, 'userspace_proxy_connections_total', web)).toBe(1);
    metrics.prune(new Set());
    m = await scrape();
    expect(sampleValue(m, 'userspace_proxy_connections_total', web)).toBeUndefined();
  });

  it('ignores malformed messages instead of breaking the publisher', () => {
    setup();
    expect(() => publish(CHANNELS.connectionClose, null)).not.toThrow();
    expect(() => publish(CHANNELS.sync, { durationMs: 'x' })).not.toThrow();
  });

  it('stops counting after unsubscribe', async () => {
    const { scrape } = setup();
    unsubscribe?.();
    unsubscribe = undefined;
    publish(CHANNELS.serviceChange, { service: 'default/web' });
    expect(sampleValue(await scrape(), 'kubeproxy_sync_proxy_rules_service_changes_total')).toBe(0);
  });

  it('includes the build info and, by default, process metrics', async () => {
    const metrics = new ProxyMetrics();
    const m = parseExposition(await metrics.registry.metrics());
    expect(
      m.samples.find((s) => s.name === 'userspace_proxy_build_info')?.labels.node_version,
    ).toBe(process.version);
    expect(m.samples.some((s) => s.name === 'process_cpu_user_seconds_total')).toBe(true);
  });
});
