/** The median and spread of a few repetitions. */
export interface Stat {
  median: number;
  min: number;
  max: number;
}

/** Median, min and max of `xs` (NaN-free; an empty list gives zeros). */
export function stat(xs: readonly number[]): Stat {
  if (xs.length === 0) return { median: 0, min: 0, max: 0 };
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  const median =
    s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
  return { median, min: s[0] as number, max: s[s.length - 1] as number };
}
