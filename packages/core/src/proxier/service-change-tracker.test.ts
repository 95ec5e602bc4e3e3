import { describe, expect, it } from 'vitest';
import type { Service } from '../model/model.js';
import { ServiceChangeTracker } from './service-change-tracker.js';

function svc(port: number): Service {
  return {
    metadata: { namespace: 'ns', name: 's' },
    spec: { clusterIP: '10.0.0.1', ports: [{ name: 'p', port, protocol: 'TCP' }] },
  };
}

describe('ServiceChangeTracker: the collapse table', () => {
  const S = svc(80);
  const S1 = svc(81);
  const S2 = svc(82);

  it('add(S) gives {∅, S}', () => {
    const t = new ServiceChangeTracker();
    expect(t.update('ns/s', null, S)).toBe(true);
    expect(t.get('ns/s')).toEqual({ previous: null, current: S });
  });

  it('add(S) → update(S→S′) gives {∅, S′}', () => {
    const t = new ServiceChangeTracker();
    t.update('ns/s', null, S);
    t.update('ns/s', S, S1);
    expect(t.get('ns/s')).toEqual({ previous: null, current: S1 });
  });

  it('add(S) → delete(S) gives nothing', () => {
    const t = new ServiceChangeTracker();
    t.update('ns/s', null, S);
    expect(t.update('ns/s', S, null)).toBe(false);
    expect(t.get('ns/s')).toBeUndefined();
    expect(t.size).toBe(0);
  });

  it('update(S→S′) → update(S′→S″) keeps the oldest previous: {S, S″}', () => {
    const t = new ServiceChangeTracker();
    t.update('ns/s', S, S1);
    t.update('ns/s', S1, S2);
    expect(t.get('ns/s')).toEqual({ previous: S, current: S2 });
  });

  it('update(S→S′) → delete(S′) gives {S, ∅}', () => {
    const t = new ServiceChangeTracker();
    t.update('ns/s', S, S1);
    t.update('ns/s', S1, null);
    expect(t.get('ns/s')).toEqual({ previous: S, current: null });
  });

  it('delete(S) → add(S′) gives {S, S′}', () => {
    const t = new ServiceChangeTracker();
    t.update('ns/s', S, null);
    t.update('ns/s', null, S1);
    expect(t.get('ns/s')).toEqual({ previous: S, current: S1 });
  });

  it('an update back to the original state collapses to nothing', () => {
    const t = new ServiceChangeTracker();
    t.update('ns/s', S, S1);
    expect(t.update('ns/s', S1, svc(80))).toBe(false);
    expect(t.size).toBe(0);
  });

  it('a resync update (same object, or deep-equal copies) records nothing', () => {
    const t = new ServiceChangeTracker();
    expect(t.update('ns/s', S, S)).toBe(false);
    expect(t.update('ns/s', S, structuredClone(S))).toBe(false);
    expect(t.size).toBe(0);
  });

  it('keeps Services apart and take() empties it atomically', () => {
    const t = new ServiceChangeTracker();
    t.update('ns/a', null, S);
    t.update('ns/b', null, S1);
    const taken = t.take();
    expect([...taken.keys()]).toEqual(['ns/a', 'ns/b']);
    expect(t.size).toBe(0);
    t.update('ns/a', S, S2);
    expect(taken.get('ns/a')?.current).toBe(S);
    expect(t.get('ns/a')).toEqual({ previous: S, current: S2 });
  });
});
