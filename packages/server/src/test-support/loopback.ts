/**
 * A random loopback /24 for one test file, as its prefix ("127.a.b."): the file's Service, backend
 * and health/metrics addresses end it with fixed host numbers. Daemon tests listen on fixed ports
 * (8080, 10256, 10249), so two files sharing a fixed block collided whenever they ran at once (Vitest
 * workers on a machine with more cores, or two checkouts testing on one machine): EADDRINUSE, or a
 * client answered by the other file's daemon. 127.0.x and 127.1.x are left to the core tests' own
 * addresses (127.1.100–249.x among them), and 127.99.x to the benchmarks.
 */
export function loopbackBlock(): string {
  const second = 2 + Math.floor(Math.random() * 97); // 2–98
  const third = Math.floor(Math.random() * 256);
  return `127.${second}.${third}.`;
}
