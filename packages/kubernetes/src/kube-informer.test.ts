import diagnosticsChannel from 'node:diagnostics_channel';
import type { Service } from '@userspace-proxy/core';
import { CHANNELS, type ObjectRejectedMessage } from '@userspace-proxy/core/diagnostics';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createKubeInformer, type KubeInformerOptions } from './kube-informer.js';
import { PROXY_LABEL_SELECTOR, SERVICE_FIELD_SELECTOR } from './selectors.js';
import { FakeApiServer } from './test-support/fake-apiserver.js';
import {
  hasControlChars,
  kubeConfigFor,
  recordingHandler,
  recordingLogger,
  refuseApiRequests,
  service,
  until,
} from './test-support/helpers.js';
import { endlessContinue } from './test-support/hostile-responses.js';
import type { Timers } from './timers.js';

const SPEC = {
  path: '/api/v1/services',
  kind: 'Service',
  labelSelector: PROXY_LABEL_SELECTOR,
  fieldSelector: SERVICE_FIELD_SELECTOR,
};

let server: FakeApiServer;
let ac: AbortController;
let running: Promise<void> | undefined;

beforeEach(async () => {
  server = await FakeApiServer.start();
  ac = new AbortController();
  running = undefined;
});

afterEach(async () => {
  ac.abort();
  await running;
  await server.close();
});

function start(opts: KubeInformerOptions<Service> = {}, url = server.url) {
  const { informer, adapter } = createKubeInformer<Service>(kubeConfigFor(url), SPEC, {
    backoff: { initialMs: 20, maxMs: 100, jitter: 0 },
    watch: { shortWatchDelayMs: 20, maxShortWatchDelayMs: 200 },
    ...opts,
  });
  const rec = recordingHandler<Service>();
  adapter.addEventHandler(rec.handler);
  running = adapter.run(ac.signal);
  return { informer, adapter, ...rec };
}

describe('a client-node informer behind the adapter, against a list/watch API server', () => {
  it('syncs after the initial (paged) list, honouring kube-proxy selectors', async () => {
    for (let i = 0; i < 5; i++)
      server.store.create('services', service('ns', `s${i}`, `10.0.0.${i + 1}`));
    server.store.create('services', service('ns', 'headless', 'None'));
    server.store.create(
      'services',
      service('ns', 'other', '10.0.1.1', 80, { 'service.kubernetes.io/service-proxy-name': 'x' }),
    );
    const { adapter, calls } = start({ list: { pageSize: 2 } });
    expect(adapter.hasSynced()).toBe(false);
    await adapter.waitForSync(ac.signal);
    expect(calls.map((c) => c[1]).sort()).toEqual(['ns/s0', 'ns/s1', 'ns/s2', 'ns/s3', 'ns/s4']);
    expect(server.count('list', 'services')).toBe(3); // 5 items, 2 per page
    const list = server.requests.find((r) => r.verb === 'list');
    expect(list?.query.get('labelSelector')).toBe(PROXY_LABEL_SELECTOR);
    expect(list?.query.get('fieldSelector')).toBe(SERVICE_FIELD_SELECTOR);
  });

  it('delivers add, update (old and new) and delete from the watch', async () => {
    server.store.create('services', service('ns', 'a', '10.0.0.1'));
    const { adapter, calls } = start();
    await adapter.waitForSync(ac.signal);
    await until(() => server.openWatches('services') === 1, 'watch');
    const b = server.store.create('services', service('ns', 'b', '10.0.0.2'));
    const old = server.store.get('services', 'ns', 'a')?.metadata.resourceVersion;
    const upd = server.store.update('services', { ...service('ns', 'a', '10.0.0.1', 81) });
    server.store.delete('services', 'ns', 'b');
    await until(() => calls.length === 4, 'events');
    expect(calls).toEqual([
      ['add', 'ns/a'],
      ['add', 'ns/b'],
      ['update', 'ns/a', `${old}->${upd.metadata.resourceVersion}`],
      ['delete', 'ns/b'],
    ]);
    expect(b.metadata.uid).toBeDefined();
  });

  it('turns an object leaving or entering the selector into delete and add', async () => {
    server.store.create('services', service('ns', 'a', '10.0.0.1'));
    const { adapter, calls } = start();
    await adapter.waitForSync(ac.signal);
    await until(() => server.openWatches('services') === 1, 'watch');
    server.store.update(
      'services',
      service('ns', 'a', '10.0.0.1', 80, { 'service.kubernetes.io/service-proxy-name': 'x' }),
    );
    await until(() => calls.length === 2, 'delete');
    server.store.update('services', service('ns', 'a', '10.0.0.1'));
    await until(() => calls.length === 3, 're-add');
    expect(calls.map((c) => c[0])).toEqual(['add', 'delete', 'add']);
  });

  it('resumes a dropped watch from its resource version without relisting', async () => {
    server.store.create('services', service('ns', 'a', '10.0.0.1'));
    const { adapter, calls } = start();
    await adapter.waitForSync(ac.signal);
    await until(() => server.openWatches('services') === 1, 'watch');
    server.dropWatches('abrupt');
    server.store.create('services', service('ns', 'b', '10.0.0.2'));
    await until(() => calls.length === 2, 'change made while disconnected');
    server.dropWatches('clean');
    server.store.create('services', service('ns', 'c', '10.0.0.3'));
    await until(() => calls.length === 3, 'change after a clean close');
    expect(server.count('list', 'services')).toBe(1);
    expect(server.count('watch', 'services')).toBeGreaterThanOrEqual(3);
    const watches = server.requests.filter((r) => r.verb === 'watch');
    expect(watches.every((w) => w.query.get('allowWatchBookmarks') === 'true')).toBe(true);
    expect(Number(watches.at(-1)?.query.get('timeoutSeconds'))).toBeGreaterThanOrEqual(300);
  });

  for (const goneAsHttpStatus of [false, true]) {
    it(`relists after 410 Gone (${goneAsHttpStatus ? 'HTTP status' : 'ERROR event'}) and reconciles`, async () => {
      await server.close();
      server = await FakeApiServer.start({ goneAsHttpStatus });
      server.store.create('services', service('ns', 'keep', '10.0.0.1'));
      server.store.create('services', service('ns', 'change', '10.0.0.2'));
      server.store.create('services', service('ns', 'gone', '10.0.0.3'));
      const { adapter, calls } = start();
      await adapter.waitForSync(ac.signal);
      await until(() => server.openWatches('services') === 1, 'watch');
      server.dropWatches('abrupt');
      server.store.update('services', service('ns', 'change', '10.0.0.2', 99));
      server.store.delete('services', 'ns', 'gone');
      server.store.create('services', service('ns', 'new', '10.0.0.4'));
      server.store.compact();
      await until(() => server.count('list', 'services') === 2, 'relist');
      await until(() => calls.length === 6, 'reconciled events');
      expect(
        calls
          .slice(3)
          .map((c) => `${c[0]} ${c[1]}`)
          .sort(),
      ).toEqual(['add ns/new', 'delete ns/gone', 'update ns/change']);
      expect(
        adapter
          .list()
          .map((s) => s.metadata.name)
          .sort(),
      ).toEqual(['change', 'keep', 'new']);
    });
  }

  it('moves its resource version forward on bookmarks, so a compaction does not force a relist', async () => {
    server.store.create('services', service('ns', 'a', '10.0.0.1'));
    const { adapter, informer } = start();
    await adapter.waitForSync(ac.signal);
    await until(() => server.openWatches('services') === 1, 'watch');
    server.store.create('nodes', { metadata: { name: 'n1' } }); // moves the global version on
    server.bookmark();
    await until(() => informer.latestResourceVersion() === String(server.store.rv), 'bookmark');
    server.store.compact();
    server.dropWatches('clean');
    await until(
      () => server.count('watch', 'services') >= 2 && server.openWatches('services') === 1,
      'rewatch',
    );
    expect(server.count('list', 'services')).toBe(1);
  });

  it('restarts with back-off after watch and list errors, keeping what it knows', async () => {
    server.store.create('services', service('ns', 'a', '10.0.0.1'));
    server.failNext({ verb: 'list', resource: 'services' }, 500);
    const { adapter, calls } = start();
    await adapter.waitForSync(ac.signal);
    await until(() => server.openWatches('services') === 1, 'watch');
    server.failNext({ verb: 'watch', resource: 'services' }, 500, 2);
    server.dropWatches('abrupt');
    server.store.create('services', service('ns', 'b', '10.0.0.2'));
    await until(() => calls.length === 2, 'recovery');
    expect(calls.filter((c) => c[0] === 'delete')).toEqual([]);
    expect(server.count('list', 'services')).toBe(2); // the failed one and the good one
  });

  it('spaces out re-watches when the server keeps closing watches at once (no hot loop)', async () => {
    // The guard's waits go through these timers and are held until the test fires them, so each
    // re-watch provably waits for its delay: no watch request can come while its timer is held.
    const held: { ms: number; fire: () => void; watchesBefore: number }[] = [];
    const timers: Timers = {
      now: () => Date.now(),
      setTimeout: (fn, ms) => {
        const entry = { ms, fire: fn, watchesBefore: server.count('watch', 'services') };
        held.push(entry);
        return entry;
      },
      clearTimeout: (handle) => {
        const at = held.indexOf(handle as (typeof held)[number]);
        if (at >= 0) held.splice(at, 1);
      },
    };
    const { adapter } = start({
      // Every watch counts as short, however slow the machine; no stall timers.
      watch: {
        shortWatchDelayMs: 50,
        maxShortWatchDelayMs: 400,
        minWatchMs: 3_600_000,
        stallGraceMs: 3_600_000,
        timers,
      },
    });
    await adapter.waitForSync(ac.signal);
    await until(() => server.openWatches('services') === 1, 'watch');
    server.closeWatchesImmediately = true;
    server.dropWatches('clean');
    const delays: number[] = [];
    for (let i = 0; i < 6; i++) {
      await until(() => held.some((t) => t.ms < 3_600_000), `short-watch delay ${i}`);
      const timer = held.find((t) => t.ms < 3_600_000) as (typeof held)[number];
      held.splice(held.indexOf(timer), 1);
      delays.push(timer.ms);
      const watches = server.count('watch', 'services');
      expect(watches, 'a re-watch came before its delay was over').toBe(timer.watchesBefore);
      timer.fire();
      await until(() => server.count('watch', 'services') === watches + 1, `re-watch ${i}`);
    }
    // Unguarded, client-node re-watches at once, hundreds of times a second.
    expect(delays).toEqual([50, 100, 200, 400, 400, 400]);
  });

  it('replaces a watch that outlives its timeout (a half-open connection) without relisting', async () => {
    server.ignoreWatchTimeouts = true;
    const { adapter, calls } = start({
      watch: { minTimeoutSeconds: 1, stallGraceMs: 100, random: () => 0 },
    });
    await adapter.waitForSync(ac.signal);
    await until(() => server.count('watch', 'services') >= 2, 'a second watch', 10_000);
    expect(server.requests.find((r) => r.verb === 'watch')?.query.get('timeoutSeconds')).toBe('1');
    server.store.create('services', service('ns', 'after', '10.0.0.7'));
    await until(() => calls.length === 1, 'events on the new watch');
    expect(server.count('list', 'services')).toBe(1);
  });

  it('drops malformed watch events and keeps serving', async () => {
    const rejected: ObjectRejectedMessage[] = [];
    const sub = (m: unknown) => rejected.push(m as ObjectRejectedMessage);
    diagnosticsChannel.subscribe(CHANNELS.objectRejected, sub);
    try {
      const { adapter, calls } = start();
      await adapter.waitForSync(ac.signal);
      await until(() => server.openWatches('services') === 1, 'watch');
      for (const line of [
        '{"type":"ADDED","object":{}}',
        '{"type":"ADDED","object":null}',
        '{"type":"MODIFIED","object":{"metadata":{"name":""}}}',
        '{"type":"DELETED","object":[1,2]}',
        '{"type":"ERROR","object":null}',
        '{"type":"BOOKMARK","object":{}}',
        '{"type":"SURPRISE","object":{"metadata":{"name":"x"}}}',
        'this is not json',
      ]) {
        server.sendRaw('services', line);
      }
      server.store.create('services', service('ns', 'ok', '10.0.0.9'));
      await until(() => calls.length === 1, 'the good event');
      expect(calls).toEqual([['add', 'ns/ok']]);
      expect(rejected.map((r) => r.reason)).toEqual([
        'no metadata',
        'not an object',
        'no metadata.name',
        'not an object',
      ]);
    } finally {
      diagnosticsChannel.unsubscribe(CHANNELS.objectRejected, sub);
    }
  });

  it('escapes, cuts and counts an unknown watch event type and a rejected object', async () => {
    const rejected: ObjectRejectedMessage[] = [];
    const sub = (m: unknown) => rejected.push(m as ObjectRejectedMessage);
    diagnosticsChannel.subscribe(CHANNELS.objectRejected, sub);
    const { logger, lines } = recordingLogger();
    try {
      const { informer, adapter, calls } = start({ logger });
      await adapter.waitForSync(ac.signal);
      await until(() => server.openWatches('services') === 1, 'watch');
      const hostile = `\x1b]0;owned\x07\n${'y'.repeat(10_000)}`;
      server.sendRaw('services', JSON.stringify({ type: hostile, object: {} }));
      const bad = { metadata: { name: 42, namespace: hostile } };
      server.sendRaw('services', JSON.stringify({ type: 'ADDED', object: bad }));
      server.store.create('services', service('ns', 'ok', '10.0.0.9'));
      await until(() => calls.length === 1, 'the good event');
      expect(informer.stats().watch.unknownEventTypes).toBe(1);
      const warned = lines.warn.filter((l) => l.includes('owned'));
      expect(warned).toHaveLength(2);
      for (const line of warned) {
        expect(line).toContain('\\x1b]0;owned\\x07\\n');
        expect(hasControlChars(line)).toBe(false);
        expect(line.length).toBeLessThan(1_500);
      }
      expect(hasControlChars(rejected[0]?.key)).toBe(false);
      expect(rejected[0]?.key.length).toBeLessThan(300);
    } finally {
      diagnosticsChannel.unsubscribe(CHANNELS.objectRejected, sub);
    }
  });

  it('retries an endless list with back-off and never caches its partial pages', async () => {
    endlessContinue(server, 'services', 'new-token');
    const { informer, adapter, calls } = start({ list: { maxPages: 3 } });
    await until(() => informer.stats().list.limitExceeded >= 2, 'two refused lists');
    expect(adapter.hasSynced()).toBe(false);
    expect(adapter.size).toBe(0);
    expect(informer.list()).toEqual([]);
    expect(calls).toEqual([]);
    server.intercept = undefined;
    server.store.create('services', service('ns', 'a', '10.0.0.1'));
    expect(await adapter.waitForSync(ac.signal)).toBe(true);
    expect(adapter.list().map((s) => s.metadata.name)).toEqual(['a']);
  });

  it('keeps serving the last known state while the API server is gone', async () => {
    server.store.create('services', service('ns', 'a', '10.0.0.1'));
    const { adapter, calls } = start();
    await adapter.waitForSync(ac.signal);
    await until(() => server.openWatches('services') === 1, 'watch');
    const port = Number(new URL(server.url).port);
    await server.close();
    // Wait until the informer has failed to reach the API server twice (a back-off in between),
    // which is when a cache that forgets on errors would have emptied.
    const refused = await refuseApiRequests(port);
    try {
      await until(() => refused.attempts('services') >= 2, 'two failed requests');
      expect(adapter.list().map((s) => s.metadata.name)).toEqual(['a']);
      expect(calls).toEqual([['add', 'ns/a']]);
    } finally {
      await refused.close();
    }
    server = await FakeApiServer.start(); // for afterEach
  });

  it('re-delivers every object as an unchanged update on each resync', async () => {
    server.store.create('services', service('ns', 'a', '10.0.0.1'));
    const { adapter, calls } = start({ resyncPeriodMs: 30 });
    await adapter.waitForSync(ac.signal);
    await until(() => calls.length >= 3, 'resyncs');
    const rv = server.store.get('services', 'ns', 'a')?.metadata.resourceVersion;
    expect(calls[1]).toEqual(['update', 'ns/a', `${rv}->${rv}`]);
  });

  it('closes its watch when aborted', async () => {
    const { adapter } = start();
    await adapter.waitForSync(ac.signal);
    await until(() => server.openWatches('services') === 1, 'watch');
    ac.abort();
    await running;
    await until(() => server.openWatches('services') === 0, 'watch closed');
  });
});
