import type { InformerEventHandler } from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type ClientNodeInformer, fromClientNodeInformer } from './informer-adapter.js';
import { recordingHandler } from './test-support/helpers.js';
import type { Timers } from './timers.js';

interface Obj {
  metadata: {
    name: string;
    namespace?: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
  };
}

/** A client-node-shaped informer driven by the test. */
class FakeInformer implements ClientNodeInformer<Obj> {
  readonly cbs = new Map<string, ((x: never) => void)[]>();
  starts = 0;
  stops = 0;
  rv = '';
  cache: Obj[] = [];
  startResult: Promise<void> = Promise.resolve();
  on(verb: string, cb: (x: never) => void): void {
    this.cbs.set(verb, [...(this.cbs.get(verb) ?? []), cb]);
  }
  off(): void {}
  start(): Promise<void> {
    this.starts++;
    return this.startResult;
  }
  async stop(): Promise<void> {
    this.stops++;
  }
  list(): Obj[] {
    return this.cache;
  }
  latestResourceVersion(): string {
    return this.rv;
  }
  emit(verb: string, arg?: unknown): void {
    for (const cb of this.cbs.get(verb) ?? []) cb(arg as never);
  }
}

const obj = (name: string, rv: string, labels?: Record<string, string>): Obj => ({
  metadata: { name, namespace: 'ns', resourceVersion: rv, ...(labels ? { labels } : {}) },
});

const timers: Timers = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('ClientNodeInformerAdapter', () => {
  it('hands handlers the old and the new object on update', () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, { timers });
    const { calls, handler } = recordingHandler<Obj>();
    adapter.addEventHandler(handler);
    inf.emit('add', obj('a', '1'));
    inf.emit('update', obj('a', '2'));
    inf.emit('delete', obj('a', '3'));
    inf.emit('delete', obj('never-seen', '4'));
    expect(calls).toEqual([
      ['add', 'ns/a'],
      ['update', 'ns/a', '1->2'],
      ['delete', 'ns/a'],
    ]);
  });

  it('treats an update for an unknown object as an add', () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, { timers });
    const { calls, handler } = recordingHandler<Obj>();
    adapter.addEventHandler(handler);
    inf.emit('update', obj('a', '2'));
    expect(calls).toEqual([['add', 'ns/a']]);
  });

  it('replays known objects to a handler registered late, including those an informer already held', () => {
    const inf = new FakeInformer();
    inf.cache = [obj('pre', '1')];
    const adapter = fromClientNodeInformer(inf, { timers });
    inf.emit('add', obj('b', '2'));
    const { calls, handler } = recordingHandler<Obj>();
    adapter.addEventHandler(handler);
    expect(calls).toEqual([
      ['add', 'ns/pre'],
      ['add', 'ns/b'],
    ]);
  });

  it('keeps delivering to other handlers when one throws', () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, { timers });
    const bad: InformerEventHandler<Obj> = {
      onAdd: () => {
        throw new Error('boom');
      },
      onUpdate: () => {
        throw new Error('boom');
      },
      onDelete: () => {
        throw new Error('boom');
      },
    };
    const { calls, handler } = recordingHandler<Obj>();
    adapter.addEventHandler(bad);
    adapter.addEventHandler(handler);
    inf.emit('add', obj('a', '1'));
    inf.emit('update', obj('a', '2'));
    expect(calls.length).toBe(2);
  });

  it('applies a client-side filter as the API server applies selectors', () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, {
      timers,
      filter: (o) => !o.metadata.labels?.skip,
    });
    const { calls, handler } = recordingHandler<Obj>();
    adapter.addEventHandler(handler);
    inf.emit('add', obj('hidden', '1', { skip: 'y' }));
    inf.emit('add', obj('a', '2'));
    inf.emit('update', obj('a', '3', { skip: 'y' }));
    inf.emit('update', obj('a', '4'));
    inf.emit('delete', obj('hidden', '5', { skip: 'y' }));
    expect(calls).toEqual([
      ['add', 'ns/a'],
      ['delete', 'ns/a'],
      ['add', 'ns/a'],
    ]);
  });

  it('drops malformed objects', () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, { timers });
    const { calls, handler } = recordingHandler<Obj>();
    adapter.addEventHandler(handler);
    inf.emit('add', null);
    inf.emit('add', { metadata: { namespace: 'x' } });
    inf.emit('update', 'garbage');
    inf.emit('delete', undefined);
    expect(calls).toEqual([]);
  });

  it('reports synced from the resource version, a custom check, or at once for an informer without either', () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, { timers });
    expect(adapter.hasSynced()).toBe(false);
    inf.rv = '12';
    expect(adapter.hasSynced()).toBe(true);
    inf.rv = '';
    expect(adapter.hasSynced()).toBe(true); // sticky, as client-go's

    let ready = false;
    const custom = fromClientNodeInformer(new FakeInformer(), { timers, hasSynced: () => ready });
    expect(custom.hasSynced()).toBe(false);
    ready = true;
    expect(custom.hasSynced()).toBe(true);

    const full = new FakeInformer();
    const plain: ClientNodeInformer<Obj> = {
      on: full.on.bind(full),
      off: () => undefined,
      start: async () => undefined,
      stop: async () => undefined,
    };
    expect(fromClientNodeInformer(plain, { timers }).hasSynced()).toBe(true);
  });

  it('restarts a managed informer after each error with growing back-off, and stops it on abort', async () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, {
      timers,
      backoff: { initialMs: 100, maxMs: 1_000, jitter: 0 },
    });
    const ac = new AbortController();
    const done = adapter.run(ac.signal);
    expect(inf.starts).toBe(1);
    inf.emit('error', Object.assign(new Error('boom'), { statusCode: 500 }));
    inf.emit('error', new Error('again, before the retry')); // one retry pending at a time
    await vi.advanceTimersByTimeAsync(99);
    expect(inf.starts).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(inf.starts).toBe(2);
    inf.emit('error', new Error('boom'));
    await vi.advanceTimersByTimeAsync(199);
    expect(inf.starts).toBe(2);
    await vi.advanceTimersByTimeAsync(1);
    expect(inf.starts).toBe(3);
    inf.emit('error', new Error('boom'));
    ac.abort();
    await done;
    await vi.advanceTimersByTimeAsync(10_000);
    expect(inf.starts).toBe(3);
    expect(inf.stops).toBe(1);
  });

  it('retries when start() itself rejects', async () => {
    const inf = new FakeInformer();
    inf.startResult = Promise.reject(new Error('cannot build request'));
    inf.startResult.catch(() => {});
    const adapter = fromClientNodeInformer(inf, { timers, backoff: { initialMs: 50, jitter: 0 } });
    const ac = new AbortController();
    const done = adapter.run(ac.signal);
    inf.startResult = Promise.resolve();
    await vi.advanceTimersByTimeAsync(50);
    expect(inf.starts).toBe(2);
    ac.abort();
    await done;
  });

  it('leaves an unmanaged informer to its owner', async () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, { timers, manage: false });
    const ac = new AbortController();
    const done = adapter.run(ac.signal);
    inf.emit('error', new Error('x'));
    await vi.advanceTimersByTimeAsync(60_000);
    ac.abort();
    await done;
    expect(inf.starts).toBe(0);
    expect(inf.stops).toBe(0);
  });

  it('starts the informer once however many times run() is called', async () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, { timers });
    const ac = new AbortController();
    const a = adapter.run(ac.signal);
    const b = adapter.run(ac.signal);
    expect(inf.starts).toBe(1);
    ac.abort();
    await Promise.all([a, b]);
    expect(inf.stops).toBe(1);
  });

  it('resyncs every period with unchanged updates, only while running', async () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, { timers, resyncPeriodMs: 1_000 });
    const { calls, handler } = recordingHandler<Obj>();
    adapter.addEventHandler(handler);
    inf.emit('add', obj('a', '7'));
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls.length).toBe(1); // not running yet
    const ac = new AbortController();
    const done = adapter.run(ac.signal);
    await vi.advanceTimersByTimeAsync(2_000);
    expect(calls.slice(1)).toEqual([
      ['update', 'ns/a', '7->7'],
      ['update', 'ns/a', '7->7'],
    ]);
    ac.abort();
    await done;
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls.length).toBe(3);
  });
});

describe('ClientNodeInformerAdapter sync notification', () => {
  it('notifies onSynced callbacks when marked, at once when already synced, and not after cancel', async () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, { timers });
    const seen: string[] = [];
    adapter.onSynced(() => seen.push('a'));
    const cancel = adapter.onSynced(() => seen.push('cancelled'));
    cancel();
    expect(seen).toEqual([]);
    adapter.markSynced();
    expect(seen).toEqual(['a']);
    adapter.onSynced(() => seen.push('late'));
    expect(seen).toEqual(['a', 'late']);
  });

  it('polls a resource-version sync signal for waiters, and stops polling when they cancel', async () => {
    const inf = new FakeInformer();
    const adapter = fromClientNodeInformer(inf, { timers });
    const ac = new AbortController();
    const waiting = adapter.waitForSync(ac.signal);
    await vi.advanceTimersByTimeAsync(500);
    inf.rv = '5';
    await vi.advanceTimersByTimeAsync(100);
    await expect(waiting).resolves.toBe(true);

    const other = fromClientNodeInformer(new FakeInformer(), { timers });
    const ac2 = new AbortController();
    const never = other.waitForSync(ac2.signal);
    ac2.abort();
    await expect(never).resolves.toBe(false);
    expect(vi.getTimerCount()).toBe(1); // the one poll tick still scheduled ends itself
    await vi.advanceTimersByTimeAsync(100);
    expect(vi.getTimerCount()).toBe(0);
  });
});
