import { describe, expect, it } from 'vitest';
import type { Endpoints } from '../model/model.js';
import { EndpointsConfig } from './endpoints-config.js';
import type { EndpointsHandler } from './handlers.js';
import type { DeletedFinalStateUnknown } from './informer.js';
import { StaticInformer } from './informer-static.js';

const eps = (name: string, ip: string): Endpoints => ({
  metadata: { name, namespace: 'ns' },
  subsets: [{ addresses: [{ ip }], ports: [{ port: 80 }] }],
});

function recorder(log: string[]): EndpointsHandler {
  const show = (e: Endpoints) => `${e.metadata.name}@${e.subsets?.[0]?.addresses?.[0]?.ip}`;
  return {
    onEndpointsAdd: (e) => log.push(`add ${show(e)}`),
    onEndpointsUpdate: (o, e) => log.push(`update ${show(o)} -> ${show(e)}`),
    onEndpointsDelete: (e) => log.push(`delete ${show(e)}`),
    onEndpointsSynced: () => log.push('synced'),
  };
}

describe('EndpointsConfig', () => {
  it('maps informer events to the EndpointsHandler methods', async () => {
    const informer = new StaticInformer<Endpoints>({ synced: false });
    const config = new EndpointsConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder(log));
    const controller = new AbortController();
    const running = config.run(controller.signal);
    informer.add(eps('a', '10.1.0.1'));
    informer.update(eps('a', '10.1.0.2'));
    informer.markSynced();
    await Promise.resolve();
    informer.delete('ns/a');
    expect(log).toEqual([
      'add a@10.1.0.1',
      'update a@10.1.0.1 -> a@10.1.0.2',
      'synced',
      'delete a@10.1.0.2',
    ]);
    controller.abort();
    await running;
  });

  it('drops malformed Endpoints and unwraps tombstones', () => {
    const handlers: { onDelete(o: unknown): void; onAdd(o: unknown): void }[] = [];
    const informer = {
      addEventHandler: (h: (typeof handlers)[number]) => handlers.push(h),
      hasSynced: () => true,
    };
    const config = new EndpointsConfig(informer as never);
    const log: string[] = [];
    config.registerEventHandler(recorder(log));
    const h = handlers[0];
    if (!h) throw new Error('not registered');
    h.onAdd({ metadata: { name: 'bad' }, subsets: {} });
    h.onAdd({ metadata: { name: 'bad2' }, subsets: [null] });
    h.onAdd(eps('a', '10.1.0.1'));
    const tombstone: DeletedFinalStateUnknown<Endpoints> = {
      key: 'ns/a',
      obj: eps('a', '10.1.0.1'),
    };
    h.onDelete(tombstone);
    expect(log).toEqual(['add a@10.1.0.1', 'delete a@10.1.0.1']);
  });
});
