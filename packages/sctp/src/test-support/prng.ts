/** Seeded randomness for fuzz and loss tests, so a run replays from its printed seed. */
import { mulberry32 } from '@userspace-proxy/core';

/** core's mulberry32 under the name the tests use. */
export const prng = mulberry32;

/** A seed from the environment variable `name`, or a fresh random one. */
export function seedFrom(name: string): number {
  const v = process.env[name];
  return v !== undefined && v !== '' ? Number(v) >>> 0 : (Math.random() * 0x100000000) >>> 0;
}
