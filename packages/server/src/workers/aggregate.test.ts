import { Counter, Gauge, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { formatStatusTable } from '../status-cli.js';
import type { StatusModel } from '../status-model.js';
import { parseExposition, sampleValue } from '../test-support/prom-text.js';
import { mergeMetrics, mergeStatus } from './aggregate.js';
import { serviceFor } from './placement.js';

/** A registry with the metrics one process of the daemon would have. */
async function processMetrics(connections: number, endpointChanges: number) {
  const registry = new Registry();
  new Counter({
    name: 'userspace_proxy_connections_total',
    help: 'h',
    labelNames: ['service', 'protocol'],
    registers: [registry],
  }).inc({ service: 'default/web:tcp', protocol: 'TCP' }, connections);
  new Counter({
    name: 'kubeproxy_sync_proxy_rules_endpoint_changes_total',
    help: 'h',
    registers: [registry],
  }).inc(endpointChanges);
  new Gauge({ name: 'userspace_proxy_build_info', help: 'h', registers: [registry] }).set(1);
  return registry.getMetricsAsJSON();
}

describe('mergeMetrics', () => {
  it('sums the data path over workers and takes the rest from the primary', async () => {
    const text = await mergeMetrics(await processMetrics(0, 3), [
      { index: 0, pid: 10, body: await processMetrics(5, 3) },
      { index: 1, pid: 11, body: await processMetrics(7, 3) },
    ]);
    const m = parseExposition(text);
    expect(sampleValue(m, 'userspace_proxy_connections_total')).toBe(12);
    expect(sampleValue(m, 'kubeproxy_sync_proxy_rules_endpoint_changes_total')).toBe(3);
    expect(sampleValue(m, 'userspace_proxy_build_info')).toBe(1);
    expect(sampleValue(m, 'userspace_proxy_worker_connections_total', { worker: '1' })).toBe(5);
    expect(sampleValue(m, 'userspace_proxy_worker_connections_total', { worker: '2' })).toBe(7);
  });

  it('leaves out an answer that is not metrics', async () => {
    const text = await mergeMetrics(await processMetrics(0, 1), [
      { index: 0, pid: 10, body: 'garbage' },
    ]);
    expect(sampleValue(parseExposition(text), 'userspace_proxy_connections_total')).toBeUndefined();
  });
});

describe('mergeStatus', () => {
  const port = (total: number, active: number) => ({
    namespace: 'default',
    name: 'web',
    port: 'tcp',
    protocol: 'TCP' as const,
    key: 'default/web:tcp',
    servicePort: 80,
    description: '',
    portals: [],
    endpoints: ['10.0.0.1:80'],
    ejected: [],
    connectionsActive: active,
    connectionsTotal: total,
    bytesIn: 1,
    bytesOut: 2,
    udpSessionsActive: 0,
    heldConnections: null,
    refused: { 'no-endpoints': 1 },
  });
  const model = (total: number, active: number, error: string) => ({
    version: 'v',
    proxyMode: 'service-port-portal',
    generatedAt: 't',
    idling: false,
    sync: { lastTimestampSeconds: 1, lastDurationSeconds: 0.1, count: 1 },
    servicePorts: [port(total, active)],
    recentErrors: [{ time: error, kind: 'refused', service: 'default/web:tcp', message: error }],
  });

  it('sums each Service port over workers and lists the workers', () => {
    const merged = mergeStatus([
      { index: 0, pid: 10, body: model(3, 1, '2026-01-01T00:00:01Z') },
      { index: 1, pid: 11, body: model(4, 2, '2026-01-01T00:00:02Z') },
    ]);
    expect('servicePorts' in merged && merged.servicePorts).toEqual([
      { ...port(7, 3), bytesIn: 2, bytesOut: 4, refused: { 'no-endpoints': 2 } },
    ]);
    expect('workers' in merged && merged.workers).toEqual([
      { worker: 1, pid: 10, connectionsTotal: 3, connectionsActive: 1 },
      { worker: 2, pid: 11, connectionsTotal: 4, connectionsActive: 2 },
    ]);
    expect('recentErrors' in merged && merged.recentErrors.map((e) => e.message)).toEqual([
      '2026-01-01T00:00:02Z',
      '2026-01-01T00:00:01Z',
    ]);
    expect(formatStatusTable(merged as StatusModel)).toContain(
      'workers: 1 pid 10 (1 active, 3 total); 2 pid 11 (2 active, 4 total)',
    );
  });

  it('is empty before any worker answers', () => {
    expect(mergeStatus([])).toEqual({});
  });
});

describe('serviceFor', () => {
  const svc = (annotations: Record<string, string> = {}) => ({
    metadata: { name: 'web', namespace: 'default', annotations },
    spec: {
      ports: [
        { name: 'a', port: 80, protocol: 'TCP' as const },
        { name: 'b', port: 53, protocol: 'UDP' as const },
        { name: 'c', port: 90 },
        { name: 'd', port: 91, protocol: 'SCTP' as const },
      ],
    },
  });

  it('gives worker 1 everything and the others the TCP ports', () => {
    expect(serviceFor(svc(), 0, { idling: false })).toEqual(svc());
    expect(serviceFor(svc(), 1, { idling: false })?.spec?.ports?.map((p) => p.name)).toEqual([
      'a',
      'c',
    ]);
  });

  it('keeps idled Services in worker 1 when idling is on', () => {
    const idled = svc({ 'idling.alpha.openshift.io/idled-at': '2026-01-01T00:00:00Z' });
    expect(serviceFor(idled, 1, { idling: true })).toBeUndefined();
    expect(serviceFor(idled, 1, { idling: false })).toBeDefined();
    expect(serviceFor(idled, 0, { idling: true })).toBe(idled);
  });

  it('gives a UDP-only Service to worker 1 only', () => {
    const udp = {
      metadata: { name: 'dns' },
      spec: { ports: [{ port: 53, protocol: 'UDP' as const }] },
    };
    expect(serviceFor(udp, 1, { idling: false })).toBeUndefined();
  });
});
