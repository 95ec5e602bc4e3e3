import { describe, expect, it, vi } from 'vitest';
import { InvalidPortRangeError, PortAllocationError } from '../errors.js';
import type { Logger } from '../logger.js';
import { RangePortAllocator } from './port-allocator-range.js';
import type { PortRange } from './port-range.js';

/** A random source that replays `values` in a loop. */
function sequence(...values: number[]): () => number {
  let i = 0;
  return () => values[i++ % values.length] as number;
}

/** A small deterministic PRNG (an LCG), for "random order" tests that must not be flaky. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

function drain(allocator: RangePortAllocator): number[] {
  const ports: number[] = [];
  while (allocator.available() > 0) ports.push(allocator.allocateNext());
  return ports;
}

describe('RangePortAllocator', () => {
  it('starts at a random offset and takes that port when it is free', () => {
    const allocator = new RangePortAllocator({ base: 100, size: 10 }, { random: sequence(0.55) });
    expect(allocator.allocateNext()).toBe(105);
  });

  it('scans forward from a taken port to the first free one', () => {
    const allocator = new RangePortAllocator({ base: 100, size: 10 }, { random: sequence(0.55) });
    expect([1, 2, 3].map(() => allocator.allocateNext())).toEqual([105, 106, 107]);
  });

  it('wraps around to the start of the range when the end is taken', () => {
    const allocator = new RangePortAllocator({ base: 100, size: 10 }, { random: sequence(0.95) });
    expect([1, 2, 3].map(() => allocator.allocateNext())).toEqual([109, 100, 101]);
  });

  it('hands out every port exactly once, then fails at once naming the range', () => {
    const allocator = new RangePortAllocator({ base: 30000, size: 100 });
    const ports = drain(allocator);
    expect(ports).toHaveLength(100);
    expect(new Set(ports).size).toBe(100);
    expect(Math.min(...ports)).toBe(30000);
    expect(Math.max(...ports)).toBe(30099);
    expect(allocator.available()).toBe(0);
    expect(() => allocator.allocateNext()).toThrow(PortAllocationError);
    expect(() => allocator.allocateNext()).toThrow(/in the range 30000-30099/);
    try {
      allocator.allocateNext();
    } catch (error) {
      expect((error as PortAllocationError).code).toBe('ERR_PORT_ALLOCATION');
    }
  });

  it('hands ports out in a random order, not in sequence', () => {
    const allocator = new RangePortAllocator({ base: 1000, size: 64 }, { random: seeded(42) });
    const ports = drain(allocator);
    expect(new Set(ports).size).toBe(64);
    expect(ports).not.toEqual([...ports].sort((a, b) => a - b));
    // The first few picks are spread over the range rather than bunched at its start.
    expect(Math.max(...ports.slice(0, 8)) - Math.min(...ports.slice(0, 8))).toBeGreaterThan(16);
  });

  it('reuses a released port', () => {
    const allocator = new RangePortAllocator({ base: 100, size: 10 }, { random: seeded(7) });
    drain(allocator);
    allocator.release(104);
    expect(allocator.available()).toBe(1);
    expect(allocator.isAllocated(104)).toBe(false);
    expect(allocator.allocateNext()).toBe(104);
    expect(allocator.isAllocated(104)).toBe(true);
    expect(() => allocator.allocateNext()).toThrow(PortAllocationError);
  });

  it('ignores releases of ports outside the range, port 0 and garbage', () => {
    const debug = vi.fn();
    const logger = { debug, getSubLogger: () => logger } as unknown as Logger;
    const allocator = new RangePortAllocator({ base: 100, size: 10 }, { logger });
    drain(allocator);
    for (const port of [0, 99, 110, 65535, -1, 104.5, Number.NaN, Infinity]) {
      allocator.release(port);
    }
    allocator.release('105' as unknown as number);
    expect(allocator.available()).toBe(0);
    expect(debug).toHaveBeenCalled();
  });

  it('ignores a second release, so that the count never exceeds the range', () => {
    const allocator = new RangePortAllocator({ base: 100, size: 10 }, { random: sequence(0) });
    const port = allocator.allocateNext();
    expect(port).toBe(100);
    allocator.release(port);
    allocator.release(port);
    allocator.release(101); // never allocated
    expect(allocator.available()).toBe(10);
    expect(drain(allocator)).toHaveLength(10);
  });

  it('copes with a faulty random source (NaN, 1, negative, huge)', () => {
    const allocator = new RangePortAllocator(
      { base: 100, size: 10 },
      { random: sequence(Number.NaN, 1, -0.5, 7, Infinity) },
    );
    const ports = drain(allocator);
    expect(new Set(ports).size).toBe(10);
    for (const port of ports) {
      expect(port).toBeGreaterThanOrEqual(100);
      expect(port).toBeLessThanOrEqual(109);
    }
  });

  it('never hands out ports past the end of a range that does not fill its last bitmap word', () => {
    for (const size of [1, 31, 32, 33, 63, 64, 65, 100]) {
      const allocator = new RangePortAllocator({ base: 2000, size }, { random: seeded(size) });
      const ports = drain(allocator);
      expect(ports, `size ${size}`).toHaveLength(size);
      expect(new Set(ports).size).toBe(size);
      expect(Math.max(...ports)).toBe(2000 + size - 1);
      expect(Math.min(...ports)).toBe(2000);
      expect(() => allocator.allocateNext()).toThrow(PortAllocationError);
    }
  });

  it('finds the last free port of the largest range wherever the search starts', () => {
    const allocator = new RangePortAllocator({ base: 1, size: 65535 }, { random: seeded(1) });
    const ports = drain(allocator);
    expect(new Set(ports).size).toBe(65535);
    for (const last of [1, 32, 33, 40000, 65535]) {
      allocator.release(last);
      expect(allocator.allocateNext()).toBe(last);
    }
  });

  it('reports its range', () => {
    const allocator = new RangePortAllocator({ base: 30000, size: 100 });
    expect(allocator.range).toEqual({ base: 30000, size: 100 });
    expect(allocator.available()).toBe(100);
  });

  const bad: [string, unknown, RegExp][] = [
    ['base and size 0', { base: 0, size: 0 }, /empty port range/],
    ['size 0', { base: 30000, size: 0 }, /empty port range/],
    ['base 0', { base: 0, size: 10 }, /empty port range/],
    ['negative base', { base: -5, size: 10 }, /base must be a port/],
    ['fractional base', { base: 100.5, size: 10 }, /base must be a port/],
    ['base past 65535', { base: 70000, size: 1 }, /base must be a port/],
    ['negative size', { base: 100, size: -1 }, /size must be a positive integer/],
    ['NaN size', { base: 100, size: Number.NaN }, /size must be a positive integer/],
    ['a range past 65535', { base: 65535, size: 2 }, /cannot go past 65535/],
    ['null', null, /expected \{ base, size \}/],
    ['a string', '30000-30099', /expected \{ base, size \}/],
  ];
  for (const [what, range, reason] of bad) {
    it(`refuses ${what} with InvalidPortRangeError`, () => {
      expect(() => new RangePortAllocator(range as PortRange)).toThrow(InvalidPortRangeError);
      expect(() => new RangePortAllocator(range as PortRange)).toThrow(reason);
    });
  }
});
