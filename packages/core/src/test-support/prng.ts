/**
 * The seeded PRNG for tests and fuzzers of every package (core's load-balancing tests, sctp's fuzz
 * and loss tests, the soak suite's fuzz probe), so a run replays from its printed seed. It is core's
 * own `mulberry32`, which is not on core's public surface: other packages import this file by path,
 * as they do the rest of core's test-support, and no copy of the generator lives anywhere else.
 */
export { mulberry32 } from '../load-balancing/random.js';
