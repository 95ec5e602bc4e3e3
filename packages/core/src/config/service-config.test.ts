import { describe, expect, it } from 'vitest';
import type { Logger } from '../logger.js';
import type { Service } from '../model/model.js';
import type { ServiceHandler } from './handlers.js';
import { StaticInformer } from './informer-static.js';
import { ServiceConfig } from './service-config.js';

describe('ServiceConfig', () => {
  it('maps events to the ServiceHandler methods and names itself in logs', async () => {
    const lines: string[] = [];
    const names: (string | undefined)[] = [];
    const logger: Logger = {
      silly: () => {},
      trace: () => {},
      debug: () => {},
      info: (...a: unknown[]) => lines.push(String(a[0])),
      warn: () => {},
      error: () => {},
      fatal: () => {},
      getSubLogger: (s) => {
        names.push(s?.name);
        return logger;
      },
    };
    const informer = new StaticInformer<Service>({ synced: false });
    const config = new ServiceConfig(informer, { logger });
    const log: string[] = [];
    const handler: ServiceHandler = {
      onServiceAdd: (s) => log.push(`add ${s.metadata.name} ${s.spec.ports?.[0]?.protocol}`),
      onServiceUpdate: (o, s) => log.push(`update ${o.spec.clusterIP} -> ${s.spec.clusterIP}`),
      onServiceDelete: (s) => log.push(`delete ${s.metadata.name}`),
      onServiceSynced: () => log.push('synced'),
    };
    config.registerEventHandler(handler);
    const controller = new AbortController();
    const running = config.run(controller.signal);
    informer.replace([
      { metadata: { name: 'a' }, spec: { clusterIP: '10.0.0.1', ports: [{ port: 53 }] } },
    ]);
    await Promise.resolve();
    informer.update({ metadata: { name: 'a' }, spec: { clusterIP: '10.0.0.2' } });
    informer.delete('default/a');
    controller.abort();
    await running;
    expect(log).toEqual(['add a TCP', 'synced', 'update 10.0.0.1 -> 10.0.0.2', 'delete a']);
    expect(names).toContain('service config');
    expect(lines).toEqual([
      'Starting service config controller',
      'Waiting for caches to sync for service config',
      'Caches are synced for service config',
    ]);
  });
});
