/** Serial number arithmetic (RFC 1982) for 32-bit TSNs and 16-bit SSNs. */

/** a < b in 32-bit serial order. */
export function tsnLt(a: number, b: number): boolean {
  return a !== b && (b - a) >>> 0 < 0x80000000;
}

/** a <= b in 32-bit serial order. */
export function tsnLte(a: number, b: number): boolean {
  return a === b || (b - a) >>> 0 < 0x80000000;
}

/** b - a as a non-negative distance when a <= b (32-bit wrap). */
export function tsnDiff(a: number, b: number): number {
  return (b - a) >>> 0;
}

/** a + n modulo 2^32. */
export function tsnAdd(a: number, n: number): number {
  return (a + n) >>> 0;
}

/** a < b in 16-bit serial order. */
export function ssnLt(a: number, b: number): boolean {
  return a !== b && ((b - a) & 0xffff) < 0x8000;
}
