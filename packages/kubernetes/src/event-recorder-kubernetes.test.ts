import type { ObjectReference } from '@userspace-proxy/core';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { CoreV1EventBody, EventPatch } from './event-correlator.js';
import { KubernetesEventRecorder } from './event-recorder-kubernetes.js';
import type { EventSink } from './event-sink.js';
import { FakeApiServer } from './test-support/fake-apiserver.js';
import { kubeConfigFor } from './test-support/helpers.js';
import type { Timers } from './timers.js';

const svc: ObjectReference = {
  kind: 'Service',
  apiVersion: 'v1',
  namespace: 'shop',
  name: 'web',
  uid: 'u1',
};
const nodeRef: ObjectReference = { kind: 'Node', name: 'n1', uid: 'n1' };

const fakeTimers: Timers = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

type Op = ['create', string, number] | ['patch', string, number];

class ScriptedSink implements EventSink {
  ops: Op[] = [];
  failures: unknown[] = [];
  async create(event: CoreV1EventBody): Promise<void> {
    this.ops.push(['create', event.metadata.name, event.count]);
    const f = this.failures.shift();
    if (f) throw f;
  }
  async patch(_ns: string, name: string, patch: EventPatch): Promise<void> {
    this.ops.push(['patch', name, patch.count]);
    const f = this.failures.shift();
    if (f) throw f;
  }
}

const status = (statusCode: number) =>
  Object.assign(new Error(`HTTP ${statusCode}`), { statusCode });

afterEach(() => {
  vi.useRealTimers();
});

describe('KubernetesEventRecorder with a scripted sink', () => {
  it('creates, then patches repeats; a vanished Event is created again', async () => {
    const sink = new ScriptedSink();
    const rec = new KubernetesEventRecorder(sink, { host: 'n1' });
    rec.event(svc, 'Normal', 'NeedPods', 'scale up');
    rec.event(svc, 'Normal', 'NeedPods', 'scale up');
    sink.failures = [undefined, status(404)];
    rec.event(svc, 'Normal', 'NeedPods', 'scale up');
    await rec.flush();
    const name = sink.ops[0]?.[1];
    expect(sink.ops).toEqual([
      ['create', name, 1],
      ['patch', name, 2],
      ['patch', name, 3],
      ['create', name, 3],
    ]);
    expect(rec.stats).toMatchObject({ written: 3, failed: 0 });
  });

  it('retries while the server is unreachable, then gives up; never retries a refusal', async () => {
    vi.useFakeTimers();
    const sink = new ScriptedSink();
    const rec = new KubernetesEventRecorder(sink, {
      maxAttempts: 3,
      retryIntervalMs: 1_000,
      random: () => 0.5,
      timers: fakeTimers,
    });
    const refused = Object.assign(new Error('ECONNREFUSED'), { code: 'ECONNREFUSED' });
    sink.failures = [refused, refused, refused, status(422), status(409)];
    rec.event(svc, 'Warning', 'A', 'a');
    rec.event(svc, 'Warning', 'B', 'b');
    rec.event(svc, 'Warning', 'C', 'c');
    await vi.advanceTimersByTimeAsync(0);
    expect(sink.ops.length).toBe(1);
    await vi.advanceTimersByTimeAsync(500); // first wait: a random part of the interval
    expect(sink.ops.length).toBe(2);
    await vi.advanceTimersByTimeAsync(1_000);
    await rec.flush();
    expect(sink.ops.map((o) => o[0])).toEqual(['create', 'create', 'create', 'create', 'create']);
    expect(rec.stats).toMatchObject({ written: 0, failed: 2 }); // A gave up, B refused (422), C existed (409)
  });

  it('drops writes beyond its queue, counting them', async () => {
    const sink = new ScriptedSink();
    const rec = new KubernetesEventRecorder(sink, { maxQueued: 3, burst: 1000 });
    for (let i = 0; i < 10; i++) rec.event({ ...svc, name: `s${i}` }, 'Normal', 'R', 'm');
    await rec.flush();
    // The first write leaves the queue at once; three more wait; the rest are dropped.
    expect(sink.ops.length).toBe(4);
    expect(rec.stats.dropped).toBe(6);
  });

  it('ignores malformed references and anything after close', async () => {
    const sink = new ScriptedSink();
    const rec = new KubernetesEventRecorder(sink);
    rec.event(undefined as unknown as ObjectReference, 'Normal', 'R', 'm');
    rec.event({ kind: 'Service', name: '' }, 'Normal', 'R', 'm');
    rec.event({ name: 'x' } as ObjectReference, 'Normal', 'R', 'm');
    await rec.close();
    rec.event(svc, 'Normal', 'R', 'm');
    await rec.flush();
    expect(sink.ops).toEqual([]);
  });
});

describe('KubernetesEventRecorder against an API server', () => {
  it('writes core/v1 Events and lets a flood of NeedPods cost at most the burst', async () => {
    const server = await FakeApiServer.start();
    try {
      const rec = new KubernetesEventRecorder(kubeConfigFor(server.url), { host: 'n1' });
      for (let i = 0; i < 1000; i++)
        rec.event(svc, 'Normal', 'NeedPods', 'The service-port shop/web:http needs pods.');
      rec.event(nodeRef, 'Normal', 'Starting', 'Starting userspace-proxy.');
      await rec.flush();
      expect(server.count('create', 'events')).toBe(2);
      expect(server.count('patch', 'events')).toBe(24);
      const stored = server.store.list('events');
      const need = stored.find((e) => e.reason === 'NeedPods');
      expect(need).toMatchObject({
        metadata: { namespace: 'shop' },
        involvedObject: svc,
        type: 'Normal',
        count: 25,
        source: { component: 'userspace-proxy', host: 'n1' },
        reportingComponent: 'userspace-proxy',
        reportingInstance: 'n1',
      });
      expect(need?.firstTimestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
      const starting = stored.find((e) => e.reason === 'Starting');
      expect(starting?.metadata.namespace).toBe('default'); // cluster-scoped objects' events
      expect(rec.stats).toMatchObject({ written: 26, skipped: 975, dropped: 0, failed: 0 });
      await rec.close();
    } finally {
      await server.close();
    }
  });
});
