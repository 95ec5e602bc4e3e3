import diagnosticsChannel from 'node:diagnostics_channel';
import type { Proxier, ServiceInfo } from '@userspace-proxy/core';
import { CHANNELS } from '@userspace-proxy/core/diagnostics';
import { Gauge, Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { buildStatusModel, ServiceCatalog } from './status-model.js';
import { STATUS_ERROR_MAX_CHARS, StatusRecorder } from './status-recorder.js';

const recorders: StatusRecorder[] = [];
afterEach(() => {
  for (const r of recorders.splice(0)) r.close();
});

const service = (
  name: string,
  ports: { name?: string; port: number; protocol?: 'TCP' | 'UDP' }[],
) => ({
  metadata: { namespace: 'ns', name },
  spec: { ports },
});

describe('StatusRecorder', () => {
  it('keeps the last N errors, newest first, bounded and escaped', () => {
    const r = new StatusRecorder({ maxErrors: 3, now: () => 0 });
    recorders.push(r);
    for (let i = 0; i < 5; i++) {
      diagnosticsChannel.channel(CHANNELS.refused).publish({
        service: `ns/s${i}:p`,
        protocol: 'TCP',
        reason: 'no-endpoints',
      });
    }
    diagnosticsChannel.channel(CHANNELS.dialError).publish({
      service: 'ns/x:p',
      protocol: 'TCP',
      endpoint: '10.0.0.1:80',
      error: new Error(`boom\n${'y'.repeat(2000)}`),
    });
    const errors = r.recentErrors();
    expect(errors.map((e) => e.service)).toEqual(['ns/x:p', 'ns/s4:p', 'ns/s3:p']);
    expect(errors[0]?.message.length).toBeLessThanOrEqual(STATUS_ERROR_MAX_CHARS + 40);
    expect(errors[0]?.message).not.toContain('\n');
    expect(errors[1]).toMatchObject({
      kind: 'refused',
      message: 'no-endpoints',
      time: '1970-01-01T00:00:00.000Z',
    });
    r.close();
    diagnosticsChannel
      .channel(CHANNELS.sync)
      .publish({ durationMs: 5, changes: 0, servicePorts: 0 });
    expect(r.syncCount()).toBe(0);
  });
});

describe('buildStatusModel', () => {
  it('matches portals to ports, reads metrics by name, and defaults what is missing', async () => {
    const registry = new Registry();
    const active = new Gauge({
      name: 'userspace_proxy_connections_active',
      help: 'x',
      labelNames: ['service', 'protocol'],
      registers: [registry],
    });
    active.set({ service: 'ns/a:http', protocol: 'TCP' }, 3);
    const catalog = new ServiceCatalog();
    catalog.onServiceAdd(service('b', [{ port: 53, protocol: 'UDP' }]));
    catalog.onServiceAdd(
      service('a', [
        { name: 'http', port: 80 },
        { name: 'https', port: 443 },
      ]),
    );
    const info = (name: string, port: number, protocol: 'TCP' | 'UDP') =>
      ({
        serviceRef: { kind: 'Service', namespace: 'ns', name },
        protocol,
        portal: { ip: '10.0.0.1', port, isExternal: false },
        proxyPort: 40000 + port,
        nodePort: 0,
      }) as unknown as ServiceInfo;
    const proxier = {
      serviceInfos: () => [info('a', 80, 'TCP'), info('a', 443, 'TCP'), info('b', 53, 'UDP')],
    } as unknown as Proxier;
    const recorder = new StatusRecorder();
    recorders.push(recorder);
    const m = await buildStatusModel({
      version: '0',
      proxyMode: 'service-port-portal',
      registry,
      catalog,
      recorder,
      proxier: () => proxier,
      idling: false,
      now: () => 0,
    });
    expect(
      m.servicePorts.map((p) => [p.key, p.portals.map((x) => x.port), p.connectionsActive]),
    ).toEqual([
      ['ns/a:http', [80], 3],
      ['ns/a:https', [443], 0],
      ['ns/b', [53], 0],
    ]);
    expect(m.servicePorts[0]).toMatchObject({
      endpoints: null,
      ejected: null,
      heldConnections: null,
      refused: {},
    });
    expect(m.sync).toEqual({ lastTimestampSeconds: null, lastDurationSeconds: null, count: 0 });
    catalog.onServiceDelete(service('a', []));
    expect(catalog.services().map((s) => s.metadata.name)).toEqual(['b']);
  });
});
