import type { Logger } from '../logger.js';

/**
 * Hands out the ports proxy sockets listen on in redirect mode (one per Service port), so that a
 * host firewall can allow exactly the configured range. It is synchronous on purpose: in one event
 * loop a free port can be found on the spot, so there is no background filler and no waiting (the Go
 * proxier's 1 s wait, docs/differences.md). Callers release every port they allocated, including when
 * opening the socket failed afterwards, so a range never leaks ports.
 */
export interface PortAllocator {
  /**
   * A port nobody else holds, marked as taken; 0 means "bind port 0 and let the OS choose".
   * @throws PortAllocationError when every port of the range is taken (immediately, no wait).
   */
  allocateNext(): number;
  /**
   * Gives a port back. Ports outside the range, 0, ports not currently allocated and repeated
   * releases are ignored, so that callers can release unconditionally on every cleanup path.
   */
  release(port: number): void;
}

/** Options of `newPortAllocator` (port-allocator-factory.ts); every one has a default. */
export interface PortAllocatorOptions {
  /**
   * A source of numbers in [0, 1), used to pick where each search for a free port starts. Default
   * `Math.random`; tests inject a sequence to make the order of ports deterministic.
   */
  random?: () => number;
  /** tslog-compatible; default silent. */
  logger?: Logger;
}
