/**
 * How fast RoundRobinLoadBalancer.nextEndpoint picks: plain round robin, and ClientIP affinity over
 * many distinct clients (every pick a sticky hit after the first round). A pick happens once per
 * accepted connection or new UDP session, so this bounds connection rates far above what a socket
 * can accept; a regression here shows as per-pick allocation or a non-O(1) path.
 *
 * Run: `npx tsx --conditions=@userspace-proxy/source bench/src/next-endpoint.ts [--quick]`.
 * The suite calls {@link benchNextEndpoint}.
 */
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { RoundRobinLoadBalancer, type ServicePortName } from '@userspace-proxy/core';
// The seeded generator is internal to core; the bench is private and reads it from source.
import { mulberry32 } from '../../packages/core/src/load-balancing/random.js';

/** Options of {@link benchNextEndpoint}; the defaults are the documented figures' setup. */
export interface NextEndpointBenchOptions {
  /** Endpoints of the Service port. Default 10. */
  endpoints?: number;
  /** Distinct client IPs in the affinity run. Default 10 000. */
  clients?: number;
  /** Timed runs per case; the median is reported. Default 5. */
  runs?: number;
  /** Length of one timed run. Default 400 ms (100 ms with `quick`). */
  runMs?: number;
  /** Fewer, shorter runs (3 × 100 ms) for the suite. */
  quick?: boolean;
}

/** Picks per second, medians of the runs, and the setup they were measured with. */
export interface NextEndpointFigures extends Record<string, number> {
  plainPicksPerSec: number;
  affinityPicksPerSec: number;
  endpoints: number;
  clients: number;
  runs: number;
}

const BATCH = 10_000;

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** Calls `pick(i)` in batches until `runMs` elapsed; returns picks per second. */
function timeRun(runMs: number, pick: (i: number) => unknown): number {
  let picks = 0;
  const start = performance.now();
  let elapsed = 0;
  do {
    for (let i = 0; i < BATCH; i++) pick(picks + i);
    picks += BATCH;
    elapsed = performance.now() - start;
  } while (elapsed < runMs);
  return (picks / elapsed) * 1000;
}

/**
 * Measures nextEndpoint picks/s without and with ClientIP affinity. Bounded in time: about
 * 2 × runs × runMs plus a short warm-up (≈ 4.5 s by default, ≈ 0.8 s with `quick`).
 */
export function benchNextEndpoint(options: NextEndpointBenchOptions = {}): NextEndpointFigures {
  const endpoints = options.endpoints ?? 10;
  const clients = options.clients ?? 10_000;
  const runs = options.runs ?? (options.quick ? 3 : 5);
  const runMs = options.runMs ?? (options.quick ? 100 : 400);

  const lb = new RoundRobinLoadBalancer({ random: mulberry32(1) });
  const plain: ServicePortName = { namespace: 'bench', name: 'plain', port: 'p' };
  const sticky: ServicePortName = { namespace: 'bench', name: 'sticky', port: 'p' };
  const addresses = Array.from({ length: endpoints }, (_, i) => ({
    ip: `10.1.${i >> 8}.${i & 255}`,
  }));
  for (const svc of [plain, sticky]) {
    lb.onEndpointsAdd({
      metadata: { namespace: svc.namespace, name: svc.name },
      subsets: [{ addresses, ports: [{ name: 'p', port: 8080 }] }],
    });
  }
  lb.newService(plain, 'None', 0);
  lb.newService(sticky, 'ClientIP', 0);
  const sources = Array.from({ length: clients }, (_, i) => ({
    address: `172.16.${i >> 8}.${i & 255}`,
    port: 40_000 + (i % 20_000),
  }));

  const pickPlain = () => lb.nextEndpoint(plain, null, false);
  const pickSticky = (i: number) =>
    lb.nextEndpoint(sticky, sources[i % clients] as (typeof sources)[number], false);
  // Warm-up: lets the JIT optimise both paths and fills the affinity map.
  timeRun(Math.min(runMs, 100), pickPlain);
  timeRun(Math.min(runMs, 100), pickSticky);

  const plainRuns: number[] = [];
  const stickyRuns: number[] = [];
  for (let r = 0; r < runs; r++) {
    plainRuns.push(timeRun(runMs, pickPlain));
    stickyRuns.push(timeRun(runMs, pickSticky));
  }
  return {
    plainPicksPerSec: Math.round(median(plainRuns)),
    affinityPicksPerSec: Math.round(median(stickyRuns)),
    endpoints,
    clients,
    runs,
  };
}

function isMain(): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(entry)).href;
  } catch {
    return false;
  }
}

if (isMain()) {
  const figures = benchNextEndpoint({ quick: process.argv.includes('--quick') });
  const m = (n: number) => `${(n / 1e6).toFixed(1)} M`;
  process.stdout.write(
    `nextEndpoint (Node ${process.version}, ${figures.endpoints} endpoints, median of ${figures.runs} runs)\n` +
      `  round robin:                         ${m(figures.plainPicksPerSec)} picks/s\n` +
      `  ClientIP affinity, ${figures.clients} clients: ${m(figures.affinityPicksPerSec)} picks/s\n`,
  );
}
