/**
 * Seeded randomness for fuzz and loss tests, so a run replays from its printed seed. (core's own
 * seeded source is not on its public surface; like the rest of core's test-support, it is
 * imported by path, for tests only.)
 */

/** A small, fast, seeded PRNG, uniform in [0, 1): core's mulberry32, through its test-support. */
export { mulberry32 as prng } from '../../../core/src/test-support/prng.js';

/** A seed from the environment variable `name`, or a fresh random one. */
export function seedFrom(name: string): number {
  const v = process.env[name];
  return v !== undefined && v !== '' ? Number(v) >>> 0 : (Math.random() * 0x100000000) >>> 0;
}
