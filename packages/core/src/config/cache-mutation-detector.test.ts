import { describe, expect, it, vi } from 'vitest';
import type { CacheMutationError } from '../errors.js';
import {
  CacheMutationDetector,
  findDifference,
  mutationDetectionFromEnv,
} from './cache-mutation-detector.js';

describe('findDifference', () => {
  it('finds nothing between equal JSON-like values', () => {
    expect(
      findDifference(
        { a: [1, { b: 'x' }], d: new Date(5) },
        { a: [1, { b: 'x' }], d: new Date(5) },
      ),
    ).toBe(undefined);
    expect(findDifference(Number.NaN, Number.NaN)).toBeUndefined();
    expect(findDifference({ a: undefined }, {})).toBeUndefined();
    expect(findDifference(new Map([[1, 'a']]), new Map([[1, 'a']]))).toBeUndefined();
  });

  it('names the path of the first difference', () => {
    expect(
      findDifference({ spec: { ports: [{ port: 80 }] } }, { spec: { ports: [{ port: 81 }] } }),
    ).toBe('spec.ports[0].port');
    expect(findDifference({ a: [1, 2] }, { a: [1] })).toBe('a.length');
    expect(findDifference({ a: 1 }, { a: 1, b: 2 })).toBe('b');
    expect(findDifference(1, 2)).toBe('');
    expect(findDifference({ a: [] }, { a: {} })).toBe('a');
    expect(findDifference({ d: new Date(1) }, { d: new Date(2) })).toBe('d');
    expect(findDifference({ d: new Date(1) }, { d: {} })).toBe('d');
    expect(findDifference(new Set([1]), new Set([2]))).toBe('[0]');
    expect(findDifference(new Set([1]), new Map())).toBe('');
  });

  it('copes with cycles, deep nesting and hostile objects without throwing', () => {
    const a: Record<string, unknown> = { x: 1 };
    a.self = a;
    const b: Record<string, unknown> = { x: 1 };
    b.self = b;
    expect(findDifference(a, b)).toBeUndefined();
    b.x = 2;
    expect(findDifference(a, b)).toBe('x');

    let deepA: Record<string, unknown> = {};
    let deepB: Record<string, unknown> = {};
    for (let i = 0; i < 50_000; i++) {
      deepA = { n: deepA };
      deepB = { n: deepB };
    }
    expect(findDifference(deepA, deepB)).toBeUndefined();

    const hostile = new Proxy(
      {},
      {
        ownKeys() {
          throw new Error('no');
        },
      },
    );
    expect(findDifference({ h: hostile }, { h: {} })).toBe('h');
  });
});

describe('mutationDetectionFromEnv', () => {
  it('reads KUBE_CACHE_MUTATION_DETECTOR like a boolean', () => {
    expect(mutationDetectionFromEnv({})).toBe(false);
    expect(mutationDetectionFromEnv({ KUBE_CACHE_MUTATION_DETECTOR: 'true' })).toBe(true);
    expect(mutationDetectionFromEnv({ KUBE_CACHE_MUTATION_DETECTOR: 'TRUE' })).toBe(true);
    expect(mutationDetectionFromEnv({ KUBE_CACHE_MUTATION_DETECTOR: '1' })).toBe(true);
    expect(mutationDetectionFromEnv({ KUBE_CACHE_MUTATION_DETECTOR: 'false' })).toBe(false);
    expect(mutationDetectionFromEnv({ KUBE_CACHE_MUTATION_DETECTOR: 'yes please' })).toBe(false);
  });
});

describe('CacheMutationDetector', () => {
  function detector(extra: Partial<ConstructorParameters<typeof CacheMutationDetector>[0]> = {}) {
    const found: CacheMutationError[] = [];
    const d = new CacheMutationDetector({
      kind: 'Service',
      onMutation: (e) => found.push(e),
      ...extra,
    });
    return { d, found };
  }

  it('reports a mutation once, with kind, key and path, then follows the new state', () => {
    const { d, found } = detector();
    const obj = { spec: { clusterIP: '10.0.0.1' } };
    d.watch('ns/a', obj);
    d.verify(obj);
    expect(found).toEqual([]);
    obj.spec.clusterIP = '10.0.0.2';
    d.verify(obj);
    d.verify(obj);
    expect(found).toHaveLength(1);
    expect(found[0]).toMatchObject({ kind: 'Service', key: 'ns/a', path: 'spec.clusterIP' });
    expect(found[0]?.message).toContain('ns/a at spec.clusterIP');
    obj.spec.clusterIP = '10.0.0.3';
    d.verify(obj);
    expect(found).toHaveLength(2);
  });

  it('keeps the first copy when an object is watched twice', () => {
    const { d, found } = detector();
    const obj = { v: 1 };
    d.watch('k', obj);
    obj.v = 2;
    d.watch('k', obj);
    d.verify(obj);
    expect(found).toHaveLength(1);
  });

  it('verifies on release, then forgets the object', () => {
    const { d, found } = detector();
    const obj = { v: 1 };
    d.watch('k', obj);
    obj.v = 2;
    d.release(obj);
    expect(found).toHaveLength(1);
    expect(d.size).toBe(0);
    obj.v = 3;
    d.verify(obj);
    expect(found).toHaveLength(1);
  });

  it('checks every watched object periodically until stopped, with injected timers', () => {
    vi.useFakeTimers();
    try {
      const { d, found } = detector({ checkIntervalMs: 500 });
      const a = { v: 1 };
      const b = { v: 1 };
      d.watch('a', a);
      d.watch('b', b);
      const controller = new AbortController();
      d.start(controller.signal);
      d.start(controller.signal);
      expect(vi.getTimerCount()).toBe(1);
      b.v = 2;
      vi.advanceTimersByTime(499);
      expect(found).toEqual([]);
      vi.advanceTimersByTime(1);
      expect(found.map((e) => e.key)).toEqual(['b']);
      controller.abort();
      expect(vi.getTimerCount()).toBe(0);
      a.v = 2;
      vi.advanceTimersByTime(5000);
      expect(found).toHaveLength(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it('bounds how many objects it watches, forgetting the oldest', () => {
    const { d, found } = detector({ maxWatched: 2 });
    const objs = [{ v: 1 }, { v: 1 }, { v: 1 }];
    objs.forEach((o, i) => {
      d.watch(`k${i}`, o);
    });
    expect(d.size).toBe(2);
    for (const o of objs) o.v = 2;
    d.verifyAll();
    expect(found.map((e) => e.key)).toEqual(['k1', 'k2']);
  });

  it('skips objects it cannot copy and survives an onMutation that throws', () => {
    const d = new CacheMutationDetector({
      kind: 'Service',
      onMutation: () => {
        throw new Error('callback');
      },
    });
    const withFunction = { f: () => 1 };
    d.watch('f', withFunction);
    expect(d.size).toBe(0);
    const obj = { v: 1 };
    d.watch('k', obj);
    obj.v = 2;
    expect(() => d.verify(obj)).not.toThrow();
    d.watch('p', 5);
    d.verify(null);
    expect(d.size).toBe(1);
  });
});
