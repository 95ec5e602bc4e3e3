import { InvalidPortRangeError, PortAllocationError } from '../errors.js';
import { componentLogger, type Logger } from '../logger.js';
import type { PortAllocator, PortAllocatorOptions } from './port-allocator.js';
import { formatPortRange, type PortRange } from './port-range.js';

const MAX_PORT = 65_535;

/** Index (0…31) of the lowest set bit of a non-zero 32-bit value. */
function lowestSetBit(value: number): number {
  return 31 - Math.clz32(value & -value);
}

/**
 * Hands out the ports of one range, each to one holder at a time, so that redirect-mode proxy sockets
 * stay inside the ports a firewall allows. Each search starts at a random offset and takes the first
 * free port from there, wrapping around, so ports come out in an unpredictable order (a restarted
 * proxy does not hand the same port to a different Service straight away) while one allocation costs
 * at most a scan of the bitmap: 2 048 words for the largest range. State is one bit per port.
 */
export class RangePortAllocator implements PortAllocator {
  readonly #base: number;
  readonly #size: number;
  /** Bit i set ⇔ port base + i is allocated. Bits past `size` in the last word are set for good. */
  readonly #used: Uint32Array;
  readonly #random: () => number;
  readonly #log: Logger;
  #free: number;

  /**
   * @throws InvalidPortRangeError for an empty range (base or size 0), a non-integer base or size,
   * or a range that reaches past 65535: a configuration mistake, reported instead of Go's panic.
   */
  constructor(range: PortRange, opts: PortAllocatorOptions = {}) {
    const { base, size } = validateRange(range);
    this.#base = base;
    this.#size = size;
    this.#used = new Uint32Array(Math.ceil(size / 32));
    const tail = size % 32;
    if (tail !== 0) {
      // Mark the bits past the end of the range as used so that a scan never returns them.
      this.#used[this.#used.length - 1] = ~((1 << tail) - 1);
    }
    this.#free = size;
    this.#random = opts.random ?? Math.random;
    this.#log = componentLogger(opts.logger, 'port-allocator');
  }

  /** The range this allocator serves (a copy). */
  get range(): PortRange {
    return { base: this.#base, size: this.#size };
  }

  /** How many ports are free right now; for inspection, metrics and tests. */
  available(): number {
    return this.#free;
  }

  /** True when `port` is in the range and currently allocated. */
  isAllocated(port: number): boolean {
    const offset = this.#offsetOf(port);
    return offset !== -1 && this.#isSet(offset);
  }

  /**
   * A free port of the range, chosen from a random starting point; see {@link PortAllocator}.
   * @throws PortAllocationError naming the range when all of it is taken.
   */
  allocateNext(): number {
    if (this.#free === 0) {
      throw new PortAllocationError(formatPortRange(this.range));
    }
    const start = this.#randomOffset();
    let offset = this.#findFree(start);
    if (offset === -1) offset = this.#findFree(0);
    if (offset === -1) {
      // Unreachable while #free is kept in step with the bitmap; fail safe rather than hand out a
      // port twice.
      throw new PortAllocationError(formatPortRange(this.range));
    }
    this.#set(offset);
    this.#free--;
    return this.#base + offset;
  }

  /** Frees `port` for reuse; anything not currently allocated from this range is ignored. */
  release(port: number): void {
    const offset = this.#offsetOf(port);
    if (offset === -1) {
      if (port !== 0) this.#log.debug(`ignoring release of port ${port}: outside the range`);
      return;
    }
    if (!this.#isSet(offset)) {
      this.#log.debug(`ignoring release of port ${port}: not allocated`);
      return;
    }
    const word = offset >>> 5;
    this.#used[word] = (this.#used[word] as number) & ~(1 << (offset & 31));
    this.#free++;
  }

  /** The offset of `port` in the range, or -1 when it is not a port of the range. */
  #offsetOf(port: number): number {
    if (!Number.isInteger(port)) return -1;
    const offset = port - this.#base;
    return offset >= 0 && offset < this.#size ? offset : -1;
  }

  #isSet(offset: number): boolean {
    return ((this.#used[offset >>> 5] as number) & (1 << (offset & 31))) !== 0;
  }

  #set(offset: number): void {
    const word = offset >>> 5;
    this.#used[word] = (this.#used[word] as number) | (1 << (offset & 31));
  }

  /** A random offset in [0, size); a faulty random source (NaN, out of [0, 1)) cannot break it. */
  #randomOffset(): number {
    const r = this.#random();
    if (!Number.isFinite(r)) return 0;
    const offset = Math.floor(r * this.#size);
    return Math.min(Math.max(offset, 0), this.#size - 1);
  }

  /** The first clear bit at or after `from`, or -1; whole words are skipped 32 ports at a time. */
  #findFree(from: number): number {
    let word = from >>> 5;
    let free = ~(this.#used[word] as number) & (-1 << (from & 31));
    while (free === 0) {
      word++;
      if (word >= this.#used.length) return -1;
      free = ~(this.#used[word] as number);
    }
    return word * 32 + lowestSetBit(free);
  }
}

/** Checks a range from code or a config file; a malformed one is an error, never a crash later. */
function validateRange(range: PortRange): PortRange {
  if (typeof range !== 'object' || range === null) {
    throw new InvalidPortRangeError(String(range), 'expected { base, size }');
  }
  const { base, size } = range;
  const shown = `base ${String(base)}, size ${String(size)}`;
  if (base === 0 || size === 0) {
    throw new InvalidPortRangeError(shown, 'may not use an empty port range');
  }
  if (!Number.isInteger(base) || base < 1 || base > MAX_PORT) {
    throw new InvalidPortRangeError(shown, `the base must be a port from 1 to ${MAX_PORT}`);
  }
  if (!Number.isInteger(size) || size < 1) {
    throw new InvalidPortRangeError(shown, 'the size must be a positive integer');
  }
  if (base + size - 1 > MAX_PORT) {
    throw new InvalidPortRangeError(shown, `the port range cannot go past ${MAX_PORT}`);
  }
  return { base, size };
}
