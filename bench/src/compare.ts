import type { BackendPorts } from './roles/backend.js';
import type { Frontend } from './roles/proxy-host.js';
import type { ProcessStats, RoleProcess } from './rpc.js';
import { type Stat, stat } from './stats.js';

/**
 * How one scenario is measured: every variant in turn, interleaved per repetition, each process's
 * CPU sampled around each measurement, and the per-repetition ratios to direct summarised.
 */

/** How long and how often each scenario runs. */
export interface SuiteConfig {
  reps: number;
  bulkMs: number;
  connMs: number;
  pingMs: number;
  udpMs: number;
  /** Datagram sizes of the UDP scenarios, unlimited and at each fixed rate. */
  udpSizes: number[];
  udpFixedRates: number[];
  idleCounts: number[];
  /** Idle connections opened and kept before the memory measurement starts. */
  idleWarm: number;
  /** How long idle connections sit before RSS is read. */
  idleSettleMs: number;
  /** [services, endpoints per service] */
  syncSizes: [number, number][];
  /** Scenario groups to run; all when empty. */
  only: string[];
  /** The idler group's size: held clients across Service ports (bench/src/idler-bench.ts). */
  idler?: { held: number; ports: number };
}

/** The three ways a load reaches its backend. */
export type Variant = 'direct' | 'naive' | 'proxy';
/** Every variant, in the order of the first repetition. */
export const VARIANTS: readonly Variant[] = ['direct', 'naive', 'proxy'];

/** CPU use of each process during a measurement, in % of one core. */
export interface CpuUse {
  load: number;
  backend: number;
  proxy: number;
}

/** One line of the results table. */
export interface Row {
  group: string;
  scenario: string;
  unit: string;
  higherIsBetter: boolean;
  values: Partial<Record<Variant, Stat>>;
  /** naive/direct and proxy/direct, per repetition, then summarised. */
  ratios: Partial<Record<'naive' | 'proxy', Stat>>;
  /** Extra per-variant figures (CPU per GB, p99…), medians. */
  extra: Partial<Record<Variant, Record<string, number>>>;
  /** Medians of each process's CPU use per variant, to show which one was the bottleneck. */
  cpu: Partial<Record<Variant, CpuUse>>;
}

/** What one measurement of one variant returns. */
export interface Measure {
  value: number;
  extra?: Record<string, number>;
}

/** The processes of a run and where each variant listens. */
export interface Env {
  backend: RoleProcess;
  proxy: RoleProcess;
  load: RoleProcess;
  ports: BackendPorts;
  frontends: Record<'naive' | 'proxy', Frontend>;
}

function push<K extends string>(o: Partial<Record<K, number[]>>, k: K, x: number): void {
  const xs = o[k];
  if (xs) xs.push(x);
  else o[k] = [x];
}

interface CpuSample {
  at: number;
  load: number;
  backend: number;
  proxy: number;
}

async function sampleCpu(env: Env): Promise<CpuSample> {
  const [load, backend, proxy] = await Promise.all(
    [env.load, env.backend, env.proxy].map((p) => p.call<ProcessStats>('stats')),
  );
  return {
    at: performance.now(),
    load: load?.cpuSeconds ?? 0,
    backend: backend?.cpuSeconds ?? 0,
    proxy: proxy?.cpuSeconds ?? 0,
  };
}

const medians = (o: Record<string, number[]>) =>
  Object.fromEntries(Object.entries(o).map(([k, xs]) => [k, stat(xs).median]));

/**
 * Runs `measure` for every variant, interleaved, `reps` times (rotating the order so that no
 * variant always runs first or last), and summarises. With `env`, the CPU use of the load
 * generator, the backend and the proxy host is sampled around every measurement.
 */
export async function compare(
  cfg: SuiteConfig,
  row: Pick<Row, 'group' | 'scenario' | 'unit' | 'higherIsBetter'>,
  variants: readonly Variant[],
  measure: (v: Variant) => Promise<Measure>,
  env?: Env,
): Promise<Row> {
  const values: Partial<Record<Variant, number[]>> = {};
  const extras: Partial<Record<Variant, Record<string, number[]>>> = {};
  const cpus: Partial<Record<Variant, Record<string, number[]>>> = {};
  const ratios: Record<'naive' | 'proxy', number[]> = { naive: [], proxy: [] };
  for (let rep = 0; rep < cfg.reps; rep++) {
    const order = variants.map((_, i) => variants[(i + rep) % variants.length] as Variant);
    const got: Partial<Record<Variant, number>> = {};
    for (const v of order) {
      const before = env ? await sampleCpu(env) : undefined;
      const m = await measure(v);
      if (env && before) {
        const after = await sampleCpu(env);
        const wall = (after.at - before.at) / 1000;
        const rec = cpus[v] ?? {};
        cpus[v] = rec;
        for (const k of ['load', 'backend', 'proxy'] as const) {
          push(rec, k, (100 * (after[k] - before[k])) / wall);
        }
      }
      got[v] = m.value;
      push(values, v, m.value);
      const rec = extras[v] ?? {};
      extras[v] = rec;
      for (const [k, x] of Object.entries(m.extra ?? {})) push(rec, k, x);
    }
    for (const v of ['naive', 'proxy'] as const) {
      const d = got.direct;
      const x = got[v];
      if (d !== undefined && x !== undefined && d > 0) ratios[v].push(x / d);
    }
  }
  const summary = (o: Partial<Record<Variant, number[]>>) =>
    Object.fromEntries(Object.entries(o).map(([k, xs]) => [k, stat(xs)]));
  return {
    ...row,
    values: summary(values),
    ratios: Object.fromEntries(
      Object.entries(ratios)
        .filter(([, xs]) => xs.length > 0)
        .map(([k, xs]) => [k, stat(xs)]),
    ),
    extra: Object.fromEntries(Object.entries(extras).map(([v, rec]) => [v, medians(rec)])),
    cpu: Object.fromEntries(
      Object.entries(cpus).map(([v, rec]) => [v, medians(rec) as unknown as CpuUse]),
    ),
  };
}
