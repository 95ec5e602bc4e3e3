import { describe, expect, it } from 'vitest';
import { mulberry32, shuffle, shuffled } from './random.js';

describe('mulberry32', () => {
  it('gives the same sequence for the same seed and another for another seed', () => {
    const a = mulberry32(42);
    const b = mulberry32(42);
    const c = mulberry32(43);
    const seqA = Array.from({ length: 20 }, a);
    expect(Array.from({ length: 20 }, b)).toEqual(seqA);
    expect(Array.from({ length: 20 }, c)).not.toEqual(seqA);
  });

  it('stays in [0, 1) and spreads evenly over ten buckets', () => {
    const random = mulberry32(7);
    const buckets = new Array<number>(10).fill(0);
    const n = 100_000;
    let outside = 0;
    for (let i = 0; i < n; i++) {
      const x = random();
      if (!(x >= 0 && x < 1)) outside++;
      else buckets[Math.floor(x * 10)] = (buckets[Math.floor(x * 10)] ?? 0) + 1;
    }
    expect(outside).toBe(0);
    // Deterministic for this seed; a broken generator lands far outside ±3 %.
    for (const count of buckets) expect(Math.abs(count - n / 10)).toBeLessThan(n / 10 / 33);
  });

  it('accepts any number as a seed', () => {
    for (const seed of [0, -1, 2 ** 40, 1.5, Number.NaN]) {
      const x = mulberry32(seed)();
      expect(x >= 0 && x < 1).toBe(true);
    }
  });
});

describe('shuffle', () => {
  it('returns the same array holding a permutation of its elements', () => {
    const items = Array.from({ length: 50 }, (_, i) => i);
    const result = shuffle(items, mulberry32(1));
    expect(result).toBe(items);
    expect([...result].sort((x, y) => x - y)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(result).not.toEqual(Array.from({ length: 50 }, (_, i) => i));
  });

  it('is deterministic for a seeded source', () => {
    const list = ['a', 'b', 'c', 'd', 'e', 'f'];
    expect(shuffled(list, mulberry32(9))).toEqual(shuffled(list, mulberry32(9)));
  });

  it('makes every permutation about equally likely (Fisher–Yates, not a biased swap)', () => {
    const random = mulberry32(3);
    const counts = new Map<string, number>();
    const n = 60_000;
    for (let i = 0; i < n; i++) {
      const key = shuffle(['a', 'b', 'c'], random).join('');
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    expect(counts.size).toBe(6);
    // A naive "swap with any index" shuffle skews these by about 20 %; allow 5 %.
    for (const count of counts.values()) expect(Math.abs(count - n / 6)).toBeLessThan(n / 6 / 20);
  });

  it('uses the source to pick: a source always giving 0 rotates the list', () => {
    // i = 3 swaps with 0, i = 2 with 0, i = 1 with 0: [a b c d] → [b c d a].
    expect(shuffle(['a', 'b', 'c', 'd'], () => 0)).toEqual(['b', 'c', 'd', 'a']);
  });

  it('never corrupts the list when the source misbehaves', () => {
    for (const bad of [() => 1, () => -0.5, () => Number.NaN, () => 7]) {
      const result = shuffle([1, 2, 3, 4, 5], bad);
      expect([...result].sort()).toEqual([1, 2, 3, 4, 5]);
    }
  });

  it('handles empty and single-element lists', () => {
    expect(shuffle([], mulberry32(1))).toEqual([]);
    expect(shuffle(['x'], mulberry32(1))).toEqual(['x']);
  });
});

describe('shuffled', () => {
  it('returns a shuffled copy and leaves the input alone', () => {
    const input = Object.freeze(Array.from({ length: 20 }, (_, i) => i));
    const out = shuffled(input, mulberry32(5));
    expect(out).not.toBe(input);
    expect(input).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect([...out].sort((x, y) => x - y)).toEqual([...input]);
  });
});
