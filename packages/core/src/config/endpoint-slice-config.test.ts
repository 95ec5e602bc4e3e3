import diagnosticsChannel from 'node:diagnostics_channel';
import { describe, expect, it } from 'vitest';
import { CHANNELS, type ObjectRejectedMessage } from '../diagnostics.js';
import type { EndpointSlice } from '../model/model.js';
import { EndpointSliceConfig } from './endpoint-slice-config.js';
import type { EndpointSliceHandler } from './handlers.js';
import { StaticInformer } from './informer-static.js';

const slice = (name: string, ip: string, service: string | null = 'web'): EndpointSlice => ({
  metadata: {
    name,
    namespace: 'ns',
    ...(service !== null && { labels: { 'kubernetes.io/service-name': service } }),
  },
  addressType: 'IPv4',
  endpoints: [{ addresses: [ip], conditions: { ready: true } }],
  ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
});

function recorder(log: string[]): EndpointSliceHandler {
  const show = (s: EndpointSlice) => `${s.metadata.name}@${s.endpoints[0]?.addresses[0]}`;
  return {
    onEndpointSliceAdd: (s) => log.push(`add ${show(s)}`),
    onEndpointSliceUpdate: (o, s) => log.push(`update ${show(o)} -> ${show(s)}`),
    onEndpointSliceDelete: (s) => log.push(`delete ${show(s)}`),
    onEndpointSlicesSynced: () => log.push('synced'),
  };
}

describe('EndpointSliceConfig', () => {
  it('maps informer events to the EndpointSliceHandler methods', async () => {
    const informer = new StaticInformer<EndpointSlice>({ synced: false });
    const config = new EndpointSliceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder(log));
    const controller = new AbortController();
    const running = config.run(controller.signal);
    informer.replace([slice('web-1', '10.1.0.1'), slice('web-2', '10.1.0.2')]);
    await Promise.resolve();
    informer.replace([slice('web-1', '10.1.0.3')]);
    expect(log).toEqual([
      'add web-1@10.1.0.1',
      'add web-2@10.1.0.2',
      'synced',
      'delete web-2@10.1.0.2',
      'update web-1@10.1.0.1 -> web-1@10.1.0.3',
    ]);
    controller.abort();
    await running;
  });

  it('rejects a slice that names no Service, publishing the reason', () => {
    const informer = new StaticInformer<EndpointSlice>();
    const config = new EndpointSliceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder(log));
    const messages: ObjectRejectedMessage[] = [];
    const listener = (m: unknown) => messages.push(m as ObjectRejectedMessage);
    diagnosticsChannel.subscribe(CHANNELS.objectRejected, listener);
    try {
      informer.add(slice('orphan', '10.1.0.1', null));
      informer.add({ ...slice('bad-type', '10.1.0.1'), addressType: 'IPv5' as never });
    } finally {
      diagnosticsChannel.unsubscribe(CHANNELS.objectRejected, listener);
    }
    expect(log).toEqual([]);
    expect(messages.map((m) => [m.kind, m.key])).toEqual([
      ['EndpointSlice', 'ns/orphan'],
      ['EndpointSlice', 'ns/bad-type'],
    ]);
    expect(messages[0]?.reason).toContain('kubernetes.io/service-name');
  });
});
