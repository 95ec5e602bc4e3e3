import diagnosticsChannel from 'node:diagnostics_channel';
import { describe, expect, it, vi } from 'vitest';
import { CHANNELS } from '../diagnostics.js';
import type { InformerEventHandler } from './informer.js';
import { StaticInformer } from './informer-static.js';

interface Obj {
  metadata: { name: string; namespace?: string };
  v?: number;
}

const obj = (name: string, v = 0, namespace = 'ns'): Obj => ({ metadata: { name, namespace }, v });

/** Records events as "id op key[=v]" strings. */
function recorder(id: string, log: string[]): InformerEventHandler<Obj> {
  const show = (o: Obj) => `${o.metadata.namespace}/${o.metadata.name}=${o.v}`;
  return {
    onAdd: (o) => log.push(`${id} add ${show(o)}`),
    onUpdate: (old, o) => log.push(`${id} update ${show(old)} -> ${show(o)}`),
    onDelete: (o) => log.push(`${id} delete ${show(o as Obj)}`),
  };
}

describe('StaticInformer', () => {
  it('delivers add, update and delete to every handler in registration order', () => {
    const informer = new StaticInformer<Obj>();
    const log: string[] = [];
    informer.addEventHandler(recorder('A', log));
    informer.addEventHandler(recorder('B', log));
    expect(informer.add(obj('a'))).toBe(true);
    expect(informer.update(obj('a', 1))).toBe(true);
    expect(informer.delete(obj('a', 1))).toBe(true);
    expect(log).toEqual([
      'A add ns/a=0',
      'B add ns/a=0',
      'A update ns/a=0 -> ns/a=1',
      'B update ns/a=0 -> ns/a=1',
      'A delete ns/a=1',
      'B delete ns/a=1',
    ]);
    expect(informer.list()).toEqual([]);
  });

  it('keys by namespace/name, defaulting the namespace', () => {
    const informer = new StaticInformer<Obj>();
    informer.add({ metadata: { name: 'a' } });
    informer.add(obj('a', 0, 'other'));
    expect(informer.keys()).toEqual(['default/a', 'other/a']);
    expect(informer.get('default/a')).toEqual({ metadata: { name: 'a' } });
  });

  it('treats an update of an unknown key as an add, and an add of a known key as an update', () => {
    const informer = new StaticInformer<Obj>();
    const log: string[] = [];
    informer.addEventHandler(recorder('A', log));
    informer.update(obj('a'));
    informer.add(obj('a', 2));
    expect(log).toEqual(['A add ns/a=0', 'A update ns/a=0 -> ns/a=2']);
  });

  it('deletes by key, delivering the stored object, and ignores unknown keys', () => {
    const informer = new StaticInformer<Obj>();
    const log: string[] = [];
    informer.addEventHandler(recorder('A', log));
    informer.add(obj('a', 3));
    expect(informer.delete('ns/missing')).toBe(false);
    expect(informer.delete('ns/a')).toBe(true);
    expect(informer.delete('ns/a')).toBe(false);
    expect(log).toEqual(['A add ns/a=3', 'A delete ns/a=3']);
  });

  it('gives a late handler an add for every stored object, and only it', () => {
    const informer = new StaticInformer<Obj>();
    const log: string[] = [];
    informer.addEventHandler(recorder('A', log));
    informer.add(obj('a'));
    informer.add(obj('b'));
    informer.addEventHandler(recorder('late', log));
    expect(log).toEqual(['A add ns/a=0', 'A add ns/b=0', 'late add ns/a=0', 'late add ns/b=0']);
  });

  it('replace() deletes what is gone, adds what is new and updates only what changed', () => {
    const informer = new StaticInformer<Obj>({ synced: false });
    const log: string[] = [];
    informer.addEventHandler(recorder('A', log));
    expect(informer.replace([obj('a'), obj('b'), obj('c')])).toBe(3);
    expect(informer.hasSynced()).toBe(true);
    log.length = 0;
    // b unchanged (a deep-equal copy), c changed, a gone, d new.
    expect(informer.replace([obj('b'), obj('c', 1), obj('d')])).toBe(3);
    expect(log).toEqual(['A delete ns/a=0', 'A update ns/c=0 -> ns/c=1', 'A add ns/d=0']);
    expect(informer.keys().sort()).toEqual(['ns/b', 'ns/c', 'ns/d']);
    log.length = 0;
    expect(informer.replace([obj('b'), obj('c', 1), obj('d')])).toBe(0);
    expect(log).toEqual([]);
    expect(informer.replace([])).toBe(3);
    expect(informer.list()).toEqual([]);
  });

  it('replace() uses the last of two objects with one key', () => {
    const informer = new StaticInformer<Obj>();
    informer.replace([obj('a', 1), obj('a', 2)]);
    expect(informer.get('ns/a')?.v).toBe(2);
  });

  it('rejects objects without a usable name, without throwing', () => {
    const informer = new StaticInformer<Obj>({ kind: 'Service' });
    const log: string[] = [];
    informer.addEventHandler(recorder('A', log));
    const messages: unknown[] = [];
    const listener = (m: unknown) => messages.push(m);
    diagnosticsChannel.subscribe(CHANNELS.objectRejected, listener);
    try {
      expect(informer.add(null as unknown as Obj)).toBe(false);
      expect(informer.add({ metadata: { name: '' } })).toBe(false);
      expect(informer.delete(42 as unknown as Obj)).toBe(false);
      expect(informer.replace([{} as Obj, obj('ok')])).toBe(1);
    } finally {
      diagnosticsChannel.unsubscribe(CHANNELS.objectRejected, listener);
    }
    expect(log).toEqual(['A add ns/ok=0']);
    expect(messages).toHaveLength(4);
    expect(messages[0]).toMatchObject({ kind: 'Service', key: '<unknown>' });
  });

  it('keeps delivering when a handler throws', () => {
    const informer = new StaticInformer<Obj>();
    const log: string[] = [];
    informer.addEventHandler({
      ...recorder('X', log),
      onAdd: () => {
        throw new Error('boom');
      },
    });
    informer.addEventHandler(recorder('B', log));
    expect(() => informer.add(obj('a'))).not.toThrow();
    expect(log).toEqual(['B add ns/a=0']);
  });

  it('queues changes made from inside a handler, so every handler sees the same order', () => {
    const informer = new StaticInformer<Obj>();
    const log: string[] = [];
    informer.addEventHandler({
      ...recorder('A', log),
      onAdd: (o) => {
        log.push(`A add ${o.metadata.name}`);
        if (o.metadata.name === 'a') informer.add(obj('b'));
      },
    });
    informer.addEventHandler({
      ...recorder('B', log),
      onAdd: (o) => log.push(`B add ${o.metadata.name}`),
    });
    informer.add(obj('a'));
    expect(log).toEqual(['A add a', 'B add a', 'A add b', 'B add b']);
  });

  it('starts synced by default; markSynced() and onSynced() notify once', () => {
    expect(new StaticInformer().hasSynced()).toBe(true);
    const informer = new StaticInformer<Obj>({ synced: false });
    expect(informer.hasSynced()).toBe(false);
    const first = vi.fn();
    const cancelled = vi.fn();
    informer.onSynced(first);
    const cancel = informer.onSynced(cancelled);
    cancel();
    informer.markSynced();
    informer.markSynced();
    expect(informer.hasSynced()).toBe(true);
    expect(first).toHaveBeenCalledTimes(1);
    expect(cancelled).not.toHaveBeenCalled();
    const late = vi.fn();
    informer.onSynced(late);
    expect(late).toHaveBeenCalledTimes(1);
  });

  it('survives a synced callback that throws', () => {
    const informer = new StaticInformer<Obj>({ synced: false });
    const after = vi.fn();
    informer.onSynced(() => {
      throw new Error('x');
    });
    informer.onSynced(after);
    expect(() => informer.markSynced()).not.toThrow();
    expect(after).toHaveBeenCalled();
  });

  it('delivers nothing while no handler is registered, and a snapshot on registration', () => {
    const informer = new StaticInformer<Obj>();
    informer.add(obj('a'));
    informer.update(obj('a', 1));
    informer.add(obj('b'));
    informer.delete('ns/b');
    const log: string[] = [];
    informer.addEventHandler(recorder('A', log));
    expect(log).toEqual(['A add ns/a=1']);
  });
});
