/**
 * Randomness behind an injectable `() => number`, so that everything random in the proxy (endpoint
 * order, port allocation) can be made deterministic in tests and reproducible in a bug report.
 */

/** A source of uniformly distributed numbers in [0, 1), shaped like `Math.random`. */
export type RandomSource = () => number;

/**
 * A small seeded PRNG (mulberry32: 32 bits of state, period 2^32). It is not cryptographic and needs
 * not be: it only has to spread clients over endpoints evenly and make tests repeatable, and it is
 * much cheaper than `crypto.randomInt`. The same seed always gives the same sequence.
 */
export function mulberry32(seed: number): RandomSource {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/**
 * Shuffles `items` in place with Fisher–Yates (every permutation equally likely for a uniform
 * source) and returns it. A misbehaving source (a value outside [0, 1), NaN) cannot produce an index
 * outside the array: such a draw leaves the element where it is, so a bad injected source degrades
 * the shuffle instead of corrupting the list.
 */
export function shuffle<T>(items: T[], random: RandomSource = Math.random): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    let j = Math.floor(random() * (i + 1));
    if (!(j >= 0 && j <= i)) j = i;
    const tmp = items[i] as T;
    items[i] = items[j] as T;
    items[j] = tmp;
  }
  return items;
}

/** A shuffled copy of `items`; the input is left untouched (callers often hand in shared lists). */
export function shuffled<T>(items: readonly T[], random: RandomSource = Math.random): T[] {
  return shuffle(items.slice(), random);
}
