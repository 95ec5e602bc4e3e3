import diagnosticsChannel from 'node:diagnostics_channel';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CHANNELS, type ObjectRejectedMessage } from '../diagnostics.js';
import { CacheMutationError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Service } from '../model/model.js';
import { validateService } from '../model/validation.js';
import type { ServiceHandler } from './handlers.js';
import type { InformerEventHandler, SharedInformer } from './informer.js';
import { StaticInformer } from './informer-static.js';
import { ServiceConfig } from './service-config.js';

/** A logger that records every line as "level: text". */
function recordingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const at =
    (level: string) =>
    (...args: unknown[]) =>
      lines.push(
        `${level}: ${args.map((a) => (a instanceof Error ? a.message : String(a))).join(' ')}`,
      );
  const logger = {
    lines,
    silly: at('silly'),
    trace: at('trace'),
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    fatal: at('fatal'),
    getSubLogger: () => logger,
  };
  return logger;
}

/** An informer the test drives by hand, delivering anything, including garbage and tombstones. */
class FakeInformer implements SharedInformer<Service> {
  handlers: InformerEventHandler<Service>[] = [];
  synced = false;
  run?: (signal: AbortSignal) => Promise<void>;
  addEventHandler(h: InformerEventHandler<Service>): void {
    this.handlers.push(h);
  }
  hasSynced(): boolean {
    return this.synced;
  }
  add(obj: unknown): void {
    for (const h of this.handlers) h.onAdd(obj as Service);
  }
  update(old: unknown, obj: unknown): void {
    for (const h of this.handlers) h.onUpdate(old as Service, obj as Service);
  }
  delete(obj: unknown): void {
    for (const h of this.handlers) h.onDelete(obj as Service);
  }
}

function svc(name: string, port = 80, namespace: string | null = 'ns'): Service {
  return {
    metadata: { name, ...(namespace !== null && { namespace }) },
    spec: { clusterIP: '10.0.0.1', ports: [{ port, protocol: 'TCP' }] },
  };
}

/** A handler that appends "<id> <event> <key>[:port]" lines to a shared log. */
function recorder(id: string, log: string[]): ServiceHandler & { objects: Service[] } {
  const show = (s: Service) =>
    `${s.metadata.namespace}/${s.metadata.name}:${s.spec.ports?.[0]?.port}`;
  const objects: Service[] = [];
  return {
    objects,
    onServiceAdd: (s) => {
      objects.push(s);
      log.push(`${id} add ${show(s)}`);
    },
    onServiceUpdate: (o, s) => {
      objects.push(o, s);
      log.push(`${id} update ${show(o)} -> ${show(s)}`);
    },
    onServiceDelete: (s) => {
      objects.push(s);
      log.push(`${id} delete ${show(s)}`);
    },
    onServiceSynced: () => log.push(`${id} synced`),
  };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('ConfigFanout events', () => {
  it('fans every event out synchronously, to every handler, in registration order', () => {
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    config.registerEventHandler(recorder('B', log));
    informer.add(svc('a'));
    expect(log).toEqual(['A add ns/a:80', 'B add ns/a:80']);
    informer.update(svc('a'), svc('a', 81));
    informer.delete(svc('a', 81));
    expect(log.slice(2)).toEqual([
      'A update ns/a:80 -> ns/a:81',
      'B update ns/a:80 -> ns/a:81',
      'A delete ns/a:81',
      'B delete ns/a:81',
    ]);
    expect(config.size).toBe(0);
  });

  it('registers with the informer at construction and delivers validated copies', () => {
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer);
    expect(informer.handlers).toHaveLength(1);
    const log: string[] = [];
    const h = recorder('A', log);
    config.registerEventHandler(h);
    const raw = svc('a', 80, null);
    informer.add(raw);
    expect(log).toEqual(['A add default/a:80']);
    expect(h.objects[0]).not.toBe(raw);
    expect(raw.metadata.namespace).toBeUndefined();
  });

  it('delivers an object a validator already returned as it is: one copy per key, not two', () => {
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer, { detectMutations: true });
    const h = recorder('A', []);
    config.registerEventHandler(h);
    const result = validateService(svc('a'));
    if (!result.ok) throw result.error;
    informer.add(result.value);
    expect(h.objects[0]).toBe(result.value);
    // A resync hands the same object again: old and new are that one object.
    informer.update(result.value, result.value);
    expect(h.objects[1]).toBe(result.value);
    expect(h.objects[2]).toBe(result.value);
    expect(config.size).toBe(1);
  });

  it('passes the object handlers last saw as the old one, by identity', () => {
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer);
    const h = recorder('A', []);
    config.registerEventHandler(h);
    informer.add(svc('a'));
    informer.update(svc('a'), svc('a', 81));
    expect(h.objects[1]).toBe(h.objects[0]);
    informer.delete(svc('a', 81));
    expect(h.objects[3]).toBe(h.objects[2]);
  });

  it('unwraps tombstones', () => {
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    informer.add(svc('a'));
    informer.delete({ key: 'ns/a', obj: svc('a') });
    expect(log).toEqual(['A add ns/a:80', 'A delete ns/a:80']);
  });

  it('uses the tombstone key when the final state has no usable metadata', () => {
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    informer.add(svc('a'));
    informer.delete({ key: 'ns/a', obj: { junk: true } });
    expect(log).toEqual(['A add ns/a:80', 'A delete ns/a:80']);
  });

  it('drops invalid objects with a warning and an objectRejected message', () => {
    const logger = recordingLogger();
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer, { logger });
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    const messages: ObjectRejectedMessage[] = [];
    const listener = (m: unknown) => messages.push(m as ObjectRejectedMessage);
    diagnosticsChannel.subscribe(CHANNELS.objectRejected, listener);
    try {
      informer.add(svc('bad', 70000));
      informer.add(null);
      informer.add({ metadata: { name: 'x' } });
      informer.add([svc('a')]);
      informer.add(svc('good'));
    } finally {
      diagnosticsChannel.unsubscribe(CHANNELS.objectRejected, listener);
    }
    expect(log).toEqual(['A add ns/good:80']);
    expect(messages).toHaveLength(4);
    expect(messages[0]).toEqual({
      kind: 'Service',
      key: 'ns/bad',
      reason: 'spec.ports[0].port: must be an integer between 1 and 65535, got 70000',
    });
    expect(messages[2]).toMatchObject({
      key: 'default/x',
      reason: 'spec: must be an object, got nothing',
    });
    const warnings = logger.lines.filter((l) => l.startsWith('warn'));
    expect(warnings[0]).toBe(
      'warn: ignoring Service ns/bad: spec.ports[0].port: must be an integer between 1 and 65535, got 70000',
    );
    expect(warnings).toHaveLength(4);
  });

  it('drops an update whose new object is invalid, keeping what handlers know', () => {
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    informer.add(svc('a'));
    informer.update(svc('a'), svc('a', 0));
    expect(log).toEqual(['A add ns/a:80']);
    // The next valid state is an update from the last state handlers saw.
    informer.update(svc('a', 0), svc('a', 82));
    expect(log).toEqual(['A add ns/a:80', 'A update ns/a:80 -> ns/a:82']);
  });

  it('turns an update whose old object was invalid (never delivered) into an add', () => {
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    informer.add(svc('a', -1));
    informer.update(svc('a', -1), svc('a', 80));
    expect(log).toEqual(['A add ns/a:80']);
    informer.update(null, svc('b'));
    expect(log).toEqual(['A add ns/a:80', 'A add ns/b:80']);
  });

  it('delivers a delete whose final state is invalid with the last valid state', () => {
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    informer.add(svc('a'));
    informer.update(svc('a'), svc('a', 99999));
    informer.delete(svc('a', 99999));
    expect(log).toEqual(['A add ns/a:80', 'A delete ns/a:80']);
    expect(config.size).toBe(0);
  });

  it('drops the delete of an object never delivered', () => {
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    informer.delete(svc('ghost'));
    informer.delete({ key: 'ns/ghost', obj: svc('ghost') });
    informer.delete(42);
    expect(log).toEqual([]);
  });

  it('delivers an add for a known key as an update (a relist)', () => {
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    informer.add(svc('a'));
    informer.add(svc('a', 81));
    expect(log).toEqual(['A add ns/a:80', 'A update ns/a:80 -> ns/a:81']);
  });

  it('logs a throwing handler and carries on with the others and with later events', () => {
    const logger = recordingLogger();
    const informer = new StaticInformer<Service>();
    const config = new ServiceConfig(informer, { logger });
    const log: string[] = [];
    config.registerEventHandler({
      ...recorder('X', log),
      onServiceAdd: () => {
        throw new Error('boom');
      },
    });
    config.registerEventHandler(recorder('B', log));
    expect(() => informer.add(svc('a'))).not.toThrow();
    informer.add(svc('b'));
    expect(log).toEqual(['B add ns/a:80', 'B add ns/b:80']);
    expect(logger.lines.filter((l) => l.startsWith('error'))).toEqual([
      'error: a Service handler threw on add of Service ns/a; the other handlers carry on boom',
      'error: a Service handler threw on add of Service ns/b; the other handlers carry on boom',
    ]);
  });

  it('gives a handler registered late nothing already delivered', () => {
    const informer = new StaticInformer<Service>();
    const config = new ServiceConfig(informer);
    informer.add(svc('a'));
    const log: string[] = [];
    config.registerEventHandler(recorder('late', log));
    expect(log).toEqual([]);
    informer.update(svc('a', 81));
    expect(log).toEqual(['late update ns/a:80 -> ns/a:81']);
  });

  it('receives the objects a StaticInformer already held when constructed', () => {
    const informer = new StaticInformer<Service>();
    informer.add(svc('a'));
    const config = new ServiceConfig(informer);
    expect(config.size).toBe(1);
  });
});

describe('ConfigFanout run', () => {
  it('starts the informer, polls until synced, calls synced once per handler in order, then waits for abort', async () => {
    vi.useFakeTimers();
    const informer = new FakeInformer();
    const runs: AbortSignal[] = [];
    informer.run = (signal) => {
      runs.push(signal);
      return new Promise(() => {});
    };
    const config = new ServiceConfig(informer, { syncPollIntervalMs: 50 });
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    config.registerEventHandler(recorder('B', log));
    const controller = new AbortController();
    let returned = false;
    const running = config.run(controller.signal).then(() => {
      returned = true;
    });
    expect(runs).toEqual([controller.signal]);
    await vi.advanceTimersByTimeAsync(500);
    expect(log).toEqual([]);
    informer.synced = true;
    await vi.advanceTimersByTimeAsync(49);
    expect(log).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(log).toEqual(['A synced', 'B synced']);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(returned).toBe(false);
    expect(log).toHaveLength(2);
    controller.abort();
    await running;
    expect(returned).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('calls synced at once when the informer is already synced', async () => {
    const informer = new FakeInformer();
    informer.synced = true;
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    const controller = new AbortController();
    const running = config.run(controller.signal);
    await Promise.resolve();
    expect(log).toEqual(['A synced']);
    controller.abort();
    await running;
  });

  it('does not call synced when aborted first, and stops polling', async () => {
    vi.useFakeTimers();
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    const controller = new AbortController();
    const running = config.run(controller.signal);
    await vi.advanceTimersByTimeAsync(1000);
    controller.abort();
    await running;
    expect(vi.getTimerCount()).toBe(0);
    informer.synced = true;
    await vi.advanceTimersByTimeAsync(1000);
    expect(log).toEqual([]);
  });

  it('returns at once, starting nothing, when the signal is already aborted', async () => {
    const informer = new FakeInformer();
    const run = vi.fn(async () => {});
    informer.run = run;
    const config = new ServiceConfig(informer);
    await config.run(AbortSignal.abort());
    expect(run).not.toHaveBeenCalled();
  });

  it('leaves the informer alone with runInformer: false', async () => {
    const informer = new FakeInformer();
    informer.synced = true;
    const run = vi.fn(async () => {});
    informer.run = run;
    const controller = new AbortController();
    const running = new ServiceConfig(informer, { runInformer: false }).run(controller.signal);
    controller.abort();
    await running;
    expect(run).not.toHaveBeenCalled();
  });

  it('waits on a StaticInformer event-driven, without timers', async () => {
    vi.useFakeTimers();
    const informer = new StaticInformer<Service>({ synced: false });
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    const controller = new AbortController();
    const running = config.run(controller.signal);
    expect(vi.getTimerCount()).toBe(0);
    informer.add(svc('a'));
    informer.markSynced();
    await Promise.resolve();
    expect(log).toEqual(['A add ns/a:80', 'A synced']);
    controller.abort();
    await running;
  });

  it('logs an informer whose run() fails or whose hasSynced() throws, and keeps going', async () => {
    vi.useFakeTimers();
    const logger = recordingLogger();
    const informer = new FakeInformer();
    informer.run = async () => {
      throw new Error('list failed');
    };
    let throws = true;
    informer.hasSynced = () => {
      if (throws) throw new Error('not ready');
      return true;
    };
    const config = new ServiceConfig(informer, { logger });
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    const controller = new AbortController();
    const running = config.run(controller.signal);
    await vi.advanceTimersByTimeAsync(300);
    expect(logger.lines).toContain('error: the Service informer failed list failed');
    expect(logger.lines).toContain(
      'error: hasSynced() threw; treating the informer as not synced not ready',
    );
    throws = false;
    await vi.advanceTimersByTimeAsync(100);
    expect(log).toEqual(['A synced']);
    controller.abort();
    await running;
  });

  it('delivers synced only once over several runs and starts the informer once', async () => {
    const informer = new FakeInformer();
    informer.synced = true;
    const run = vi.fn(() => new Promise<void>(() => {}));
    informer.run = run;
    const config = new ServiceConfig(informer);
    const log: string[] = [];
    config.registerEventHandler(recorder('A', log));
    const c1 = new AbortController();
    const c2 = new AbortController();
    const r1 = config.run(c1.signal);
    const r2 = config.run(c2.signal);
    await Promise.resolve();
    c1.abort();
    c2.abort();
    await Promise.all([r1, r2]);
    expect(log).toEqual(['A synced']);
    expect(run).toHaveBeenCalledTimes(1);
  });
});

describe('ConfigFanout mutation detection', () => {
  const mutator = (change: (s: Service) => void): ServiceHandler => ({
    onServiceAdd: change,
    onServiceUpdate: (_o, s) => change(s),
    onServiceDelete: () => {},
    onServiceSynced: () => {},
  });

  it('reports a handler that mutates the object it was given, naming the key and the field', () => {
    const logger = recordingLogger();
    const found: CacheMutationError[] = [];
    const informer = new StaticInformer<Service>();
    const config = new ServiceConfig(informer, {
      detectMutations: true,
      onMutation: (e) => found.push(e),
      logger,
    });
    config.registerEventHandler(
      mutator((s) => {
        const port = s.spec.ports?.[0];
        if (port) port.port = 9;
      }),
    );
    informer.add(svc('a'));
    expect(found).toHaveLength(1);
    expect(found[0]).toBeInstanceOf(CacheMutationError);
    expect(found[0]).toMatchObject({
      code: 'ERR_CACHE_MUTATION',
      key: 'ns/a',
      path: 'spec.ports[0].port',
    });
    expect(
      logger.lines.some((l) => l.startsWith('error: a handler mutated the cached Service ns/a')),
    ).toBe(true);
  });

  it('keeps watching a reused object delivered again by a resync', () => {
    const found: CacheMutationError[] = [];
    const informer = new FakeInformer();
    const config = new ServiceConfig(informer, {
      detectMutations: true,
      onMutation: (e) => found.push(e),
    });
    let kept: Service | undefined;
    config.registerEventHandler(
      mutator((s) => {
        kept = s;
      }),
    );
    const result = validateService(svc('a'));
    if (!result.ok) throw result.error;
    informer.add(result.value);
    informer.update(result.value, result.value);
    if (kept) kept.spec.clusterIP = '10.9.9.9';
    informer.update(result.value, result.value);
    expect(found.map((e) => e.path)).toEqual(['spec.clusterIP']);
  });

  it('is off by default and on with KUBE_CACHE_MUTATION_DETECTOR=true', () => {
    for (const [env, expected] of [
      [{}, 0],
      [{ KUBE_CACHE_MUTATION_DETECTOR: 'true' }, 1],
    ] as const) {
      const found: CacheMutationError[] = [];
      const informer = new StaticInformer<Service>();
      const config = new ServiceConfig(informer, { env, onMutation: (e) => found.push(e) });
      config.registerEventHandler(mutator((s) => Object.assign(s.metadata, { uid: 'x' })));
      informer.add(svc('a'));
      expect(found).toHaveLength(expected);
    }
  });

  it('finds a mutation made later by a handler that kept the object, on the periodic check', async () => {
    const timers = { setInterval: vi.fn(() => 1), clearInterval: vi.fn() };
    const found: CacheMutationError[] = [];
    const informer = new StaticInformer<Service>();
    const config = new ServiceConfig(informer, {
      detectMutations: true,
      onMutation: (e) => found.push(e),
      mutationTimers: timers,
      mutationCheckIntervalMs: 1234,
    });
    let kept: Service | undefined;
    config.registerEventHandler(
      mutator((s) => {
        kept = s;
      }),
    );
    const controller = new AbortController();
    const running = config.run(controller.signal);
    informer.add(svc('a'));
    expect(found).toEqual([]);
    expect(timers.setInterval).toHaveBeenCalledWith(expect.any(Function), 1234);
    if (kept) kept.spec.clusterIP = '10.9.9.9';
    const tick = timers.setInterval.mock.calls[0] as unknown as [() => void];
    tick[0]();
    expect(found.map((e) => e.path)).toEqual(['spec.clusterIP']);
    tick[0]();
    expect(found).toHaveLength(1);
    controller.abort();
    await running;
    expect(timers.clearInterval).toHaveBeenCalledWith(1);
  });
});
