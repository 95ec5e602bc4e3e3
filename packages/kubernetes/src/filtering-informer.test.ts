import { StaticInformer } from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import { FilteringInformer } from './filtering-informer.js';
import { recordingHandler } from './test-support/helpers.js';

interface Obj {
  metadata: {
    name: string;
    namespace: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
  };
}
const obj = (name: string, rv: string, skip = false): Obj => ({
  metadata: {
    name,
    namespace: 'ns',
    resourceVersion: rv,
    ...(skip ? { labels: { skip: 'y' } } : {}),
  },
});

describe('FilteringInformer', () => {
  it('turns objects entering and leaving the filter into adds and deletes, tombstones included', async () => {
    const inner = new StaticInformer<Obj>();
    const view = new FilteringInformer(inner, (o) => !o.metadata.labels?.skip);
    const { calls, handler } = recordingHandler<Obj>();
    view.addEventHandler(handler);
    inner.add(obj('a', '1'));
    inner.add(obj('hidden', '2', true));
    inner.update(obj('a', '3', true));
    inner.update(obj('a', '4'));
    inner.delete('ns/hidden');
    inner.delete('ns/a');
    await new Promise((resolve) => setImmediate(resolve));
    expect(calls).toEqual([
      ['add', 'ns/a'],
      ['delete', 'ns/a'],
      ['add', 'ns/a'],
      ['delete', 'ns/a'],
    ]);
    expect(view.hasSynced()).toBe(inner.hasSynced());
  });

  it('treats a filter that throws as "not matching"', () => {
    const handlers: { onAdd(o: unknown): void }[] = [];
    const inner = { addEventHandler: (h: never) => handlers.push(h), hasSynced: () => true };
    const view = new FilteringInformer<Obj>(inner, () => {
      throw new Error('malformed');
    });
    const { calls, handler } = recordingHandler<Obj>();
    view.addEventHandler(handler);
    handlers[0]?.onAdd(obj('a', '1'));
    expect(calls).toEqual([]);
  });
});
