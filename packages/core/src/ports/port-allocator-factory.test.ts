import { describe, expect, it } from 'vitest';
import { InvalidPortRangeError } from '../errors.js';
import { newPortAllocator } from './port-allocator-factory.js';
import { OsPortAllocator } from './port-allocator-os.js';
import { RangePortAllocator } from './port-allocator-range.js';
import { parsePortRange } from './port-range.js';

describe('newPortAllocator', () => {
  it('gives the OS allocator for an unset range: always port 0, release a no-op', () => {
    const allocator = newPortAllocator(parsePortRange(''));
    expect(allocator).toBeInstanceOf(OsPortAllocator);
    expect(allocator.allocateNext()).toBe(0);
    expect(allocator.allocateNext()).toBe(0);
    allocator.release(0);
    allocator.release(12345);
    expect(allocator.allocateNext()).toBe(0);
  });

  it('treats any base 0 as OS-chosen, as kube-proxy does', () => {
    expect(newPortAllocator({ base: 0, size: 5 })).toBeInstanceOf(OsPortAllocator);
  });

  it('gives a range allocator for a range, passing the random source on', () => {
    const allocator = newPortAllocator(parsePortRange('30000-30009'), { random: () => 0.35 });
    expect(allocator).toBeInstanceOf(RangePortAllocator);
    expect(allocator.allocateNext()).toBe(30003);
  });

  it('refuses a range with a base but no ports with InvalidPortRangeError, not a crash', () => {
    expect(() => newPortAllocator({ base: 30000, size: 0 })).toThrow(InvalidPortRangeError);
    expect(() => newPortAllocator(null as unknown as { base: number; size: number })).toThrow(
      InvalidPortRangeError,
    );
  });
});
