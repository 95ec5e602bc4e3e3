import type { PortAllocator } from './port-allocator.js';

/**
 * The allocator for "no port range": every proxy socket binds port 0 and the OS picks a free ephemeral
 * port, so there is nothing to track and nothing can run out here (the OS reports EADDRINUSE itself).
 * `release` is a no-op, because the Proxier releases the port it asked for, which is 0.
 */
export class OsPortAllocator implements PortAllocator {
  /** Always 0: bind to port 0. */
  allocateNext(): number {
    return 0;
  }

  /** Nothing to give back. */
  release(_port: number): void {}
}
