import { describe, expect, it } from 'vitest';
import { COMBINED_PREFIX, type CoreV1EventBody, EventCorrelator } from './event-correlator.js';

let n = 0;
function ev(
  name: string,
  reason: string,
  message: string,
  ts = '2024-01-01T00:00:00Z',
): CoreV1EventBody {
  return {
    apiVersion: 'v1',
    kind: 'Event',
    metadata: { name: `${name}.${(n++).toString(16)}`, namespace: 'ns' },
    involvedObject: { kind: 'Service', namespace: 'ns', name, uid: `uid-${name}` },
    reason,
    message,
    type: 'Normal',
    source: { component: 'userspace-proxy', host: 'n1' },
    reportingComponent: 'userspace-proxy',
    reportingInstance: 'n1',
    firstTimestamp: ts,
    lastTimestamp: ts,
    count: 1,
  };
}

describe('EventCorrelator', () => {
  it('creates the first event and patches the count of identical repeats', () => {
    const c = new EventCorrelator();
    const first = c.correlate(ev('web', 'NeedPods', 'scale me'), 0);
    expect(first.action).toBe('create');
    const again = c.correlate(ev('web', 'NeedPods', 'scale me', '2024-01-01T00:00:05Z'), 5_000);
    expect(again.action).toBe('patch');
    if (again.action !== 'patch' || first.action !== 'create') throw new Error('unreachable');
    expect(again.event.metadata.name).toBe(first.event.metadata.name);
    expect(again.patch).toEqual({
      count: 2,
      lastTimestamp: '2024-01-01T00:00:05Z',
      message: 'scale me',
    });
    expect(again.event.firstTimestamp).toBe('2024-01-01T00:00:00Z');
  });

  it('limits each object to its burst, refills slowly, and keeps counting what it held back', () => {
    const c = new EventCorrelator({ burst: 25, refillPerSecond: 1 / 300 });
    const actions = Array.from(
      { length: 1000 },
      () => c.correlate(ev('web', 'NeedPods', 'x'), 1_000).action,
    );
    expect(actions.filter((a) => a !== 'skip').length).toBe(25);
    expect(actions[0]).toBe('create');
    // Another object has its own allowance.
    expect(c.correlate(ev('db', 'NeedPods', 'x'), 1_000).action).toBe('create');
    // Five minutes later one more write is allowed, carrying the true count.
    expect(c.correlate(ev('web', 'NeedPods', 'x'), 1_000 + 299_000).action).toBe('skip');
    const later = c.correlate(ev('web', 'NeedPods', 'x'), 1_000 + 300_000);
    expect(later.action).toBe('patch');
    if (later.action === 'patch') expect(later.patch.count).toBe(1002);
  });

  it('combines many different messages with one reason into one counted event', () => {
    const c = new EventCorrelator({ burst: 1000 });
    const results = Array.from({ length: 15 }, (_, i) =>
      c.correlate(ev('web', 'Failed', `attempt ${i}`), i),
    );
    expect(results.slice(0, 9).every((r) => r.action === 'create')).toBe(true);
    expect(results[9]?.action).toBe('create');
    expect(results[9]?.event.message).toBe(`${COMBINED_PREFIX}attempt 9`);
    for (const r of results.slice(10)) {
      expect(r.action).toBe('patch');
      expect(r.event.metadata.name).toBe(results[9]?.event.metadata.name);
    }
    const last = results[14];
    if (last?.action === 'patch')
      expect(last.patch).toMatchObject({ count: 6, message: `${COMBINED_PREFIX}attempt 14` });
  });

  it('forgets similar messages after the window', () => {
    const c = new EventCorrelator({ burst: 1000, maxSimilarEvents: 3, similarWindowMs: 1_000 });
    c.correlate(ev('web', 'Failed', 'a'), 0);
    c.correlate(ev('web', 'Failed', 'b'), 10);
    expect(c.correlate(ev('web', 'Failed', 'c'), 20).event.message).toBe(`${COMBINED_PREFIX}c`);
    expect(c.correlate(ev('web', 'Failed', 'd'), 5_000).event.message).toBe('d');
  });

  it('bounds its caches', () => {
    const c = new EventCorrelator({ cacheSize: 2, burst: 1 });
    expect(c.correlate(ev('a', 'R', 'm'), 0).action).toBe('create');
    expect(c.correlate(ev('a', 'R', 'm'), 0).action).toBe('skip');
    c.correlate(ev('b', 'R', 'm'), 0);
    c.correlate(ev('c', 'R', 'm'), 0);
    // "a" was evicted everywhere: it starts afresh, with a new bucket and a new Event.
    expect(c.correlate(ev('a', 'R', 'm'), 0).action).toBe('create');
  });
});
