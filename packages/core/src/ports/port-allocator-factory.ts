import type { PortAllocator, PortAllocatorOptions } from './port-allocator.js';
import { OsPortAllocator } from './port-allocator-os.js';
import { RangePortAllocator } from './port-allocator-range.js';
import type { PortRange } from './port-range.js';

/**
 * The allocator for `range`: the OS allocator ({@link OsPortAllocator}) when `range.base` is 0, as
 * kube-proxy does for an unset `portRange`, and a {@link RangePortAllocator} otherwise. It lives apart
 * from the {@link PortAllocator} contract because it imports both implementations, which import the
 * contract: in one file that is an import cycle.
 * @throws InvalidPortRangeError when `range` has a base but no usable ports (size 0, past 65535).
 */
export function newPortAllocator(range: PortRange, opts: PortAllocatorOptions = {}): PortAllocator {
  if (typeof range === 'object' && range !== null && range.base === 0) {
    return new OsPortAllocator();
  }
  return new RangePortAllocator(range, opts);
}
