/**
 * Seeded randomness for fuzz and loss tests, so a run replays from its printed seed. (core's own
 * seeded source is not on its public surface, and this package uses that surface only.)
 */

/** mulberry32: a small, fast, seeded PRNG, uniform in [0, 1). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A seed from the environment variable `name`, or a fresh random one. */
export function seedFrom(name: string): number {
  const v = process.env[name];
  return v !== undefined && v !== '' ? Number(v) >>> 0 : (Math.random() * 0x100000000) >>> 0;
}
