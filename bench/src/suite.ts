import type { BackendPorts } from './roles/backend.js';
import type { Target } from './roles/loadgen.js';
import type { Frontend } from './roles/proxy-host.js';
import type { SyncCost } from './roles/sync-cost.js';
import { RoleProcess } from './rpc.js';
import { type Stat, stat } from './stats.js';

/** How long and how often each scenario runs. */
export interface SuiteConfig {
  reps: number;
  bulkMs: number;
  connMs: number;
  pingMs: number;
  udpMs: number;
  udpFixedRates: number[];
  idleCounts: number[];
  /** [services, endpoints per service] */
  syncSizes: [number, number][];
  /** Scenario groups to run; all when empty. */
  only: string[];
}

/** The full suite: a few minutes on 2 cores. */
export const FULL: SuiteConfig = {
  reps: 5,
  bulkMs: 3000,
  connMs: 3000,
  pingMs: 2000,
  udpMs: 2000,
  udpFixedRates: [20_000, 50_000],
  idleCounts: [1000, 5000],
  syncSizes: [
    [1000, 10],
    [10_000, 10],
  ],
  only: [],
};

/** A few seconds: proves the harness works end to end (CI runs it as a test). */
export const SMOKE: SuiteConfig = {
  reps: 1,
  bulkMs: 150,
  connMs: 150,
  pingMs: 100,
  udpMs: 150,
  udpFixedRates: [2000],
  idleCounts: [50],
  syncSizes: [[20, 2]],
  only: [],
};

/** The three ways a load reaches its backend. */
export type Variant = 'direct' | 'naive' | 'proxy';
const VARIANTS: readonly Variant[] = ['direct', 'naive', 'proxy'];

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
}

/** Everything one run of the suite measured. */
export interface SuiteResult {
  rows: Row[];
  sync: SyncCost[];
  nextEndpoint?: Record<string, number>;
  config: SuiteConfig;
  startedAt: string;
}

interface Measure {
  value: number;
  extra?: Record<string, number>;
}

interface Env {
  backend: RoleProcess;
  proxy: RoleProcess;
  load: RoleProcess;
  ports: BackendPorts;
  frontends: Record<'naive' | 'proxy', Frontend>;
}

function target(env: Env, v: Variant, port: keyof BackendPorts): Target {
  if (v === 'direct') return { host: '127.0.0.1', port: env.ports[port] };
  const f = env.frontends[v];
  return { host: f.host, port: f.ports[port] };
}

async function proxyCpu(env: Env): Promise<number> {
  return (await env.proxy.call<{ cpuSeconds: number }>('stats')).cpuSeconds;
}

function push<K extends string>(o: Partial<Record<K, number[]>>, k: K, x: number): void {
  const xs = o[k];
  if (xs) xs.push(x);
  else o[k] = [x];
}

/** Runs `measure` for every variant, interleaved, `reps` times (rotating the order), and summarises. */
async function compare(
  cfg: SuiteConfig,
  row: Pick<Row, 'group' | 'scenario' | 'unit' | 'higherIsBetter'>,
  variants: readonly Variant[],
  measure: (v: Variant) => Promise<Measure>,
): Promise<Row> {
  const values: Partial<Record<Variant, number[]>> = {};
  const extras: Partial<Record<Variant, Record<string, number[]>>> = {};
  const ratios: Record<'naive' | 'proxy', number[]> = { naive: [], proxy: [] };
  for (let rep = 0; rep < cfg.reps; rep++) {
    const order = variants.map((_, i) => variants[(i + rep) % variants.length] as Variant);
    const got: Partial<Record<Variant, number>> = {};
    for (const v of order) {
      const m = await measure(v);
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
    extra: Object.fromEntries(
      Object.entries(extras).map(([v, rec]) => [
        v,
        Object.fromEntries(Object.entries(rec).map(([k, xs]) => [k, stat(xs).median])),
      ]),
    ),
  };
}

async function tcpRows(env: Env, cfg: SuiteConfig, rows: Row[]): Promise<void> {
  for (const streams of [1, 8]) {
    rows.push(
      await compare(
        cfg,
        {
          group: 'tcp-bulk',
          scenario: `TCP bulk, ${streams} stream(s)`,
          unit: 'Gbit/s',
          higherIsBetter: true,
        },
        VARIANTS,
        async (v) => {
          const cpu0 = await proxyCpu(env);
          const r = await env.load.call<{ bitsPerSecond: number; bytes: number }>(
            'tcpBulk',
            target(env, v, 'tcpSink'),
            streams,
            cfg.bulkMs,
          );
          const cpu = (await proxyCpu(env)) - cpu0;
          const extra = v === 'direct' ? {} : { cpuSecondsPerGB: cpu / (r.bytes / 1e9) };
          return { value: r.bitsPerSecond / 1e9, extra };
        },
      ),
    );
  }
  for (const concurrency of [1, 32]) {
    rows.push(
      await compare(
        cfg,
        {
          group: 'conn-rate',
          scenario: `new connections/s, concurrency ${concurrency}`,
          unit: 'conn/s',
          higherIsBetter: true,
        },
        VARIANTS,
        async (v) => {
          const r = await env.load.call<{
            perSecond: number;
            p50Ms: number;
            p99Ms: number;
            errors: number;
          }>('connRate', target(env, v, 'tcpHttp'), concurrency, cfg.connMs);
          return {
            value: r.perSecond,
            extra: { p50Ms: r.p50Ms, p99Ms: r.p99Ms, errors: r.errors },
          };
        },
      ),
    );
  }
}

async function latencyRows(env: Env, cfg: SuiteConfig, rows: Row[]): Promise<void> {
  for (const protocol of ['TCP', 'UDP'] as const) {
    rows.push(
      await compare(
        cfg,
        {
          group: 'latency',
          scenario: `64 B half round trip, ${protocol}`,
          unit: 'µs',
          higherIsBetter: false,
        },
        VARIANTS,
        async (v) => {
          const port = protocol === 'TCP' ? 'tcpEcho' : 'udpEcho';
          const r = await env.load.call<{ halfRttUs: number }>(
            'pingPong',
            target(env, v, port),
            protocol,
            cfg.pingMs,
          );
          return { value: r.halfRttUs };
        },
      ),
    );
  }
}

async function udpDelivered(env: Env, v: Variant, size: number, ms: number, rate: number) {
  await env.backend.call('resetUdp');
  const r = await env.load.call<{ sent: number; seconds: number }>(
    'udpFlood',
    target(env, v, 'udpSink'),
    size,
    ms,
    rate,
  );
  const got = await env.backend.call<{ datagrams: number }>('udpCount');
  return {
    pps: got.datagrams / r.seconds,
    deliveredPct: r.sent ? (100 * got.datagrams) / r.sent : 0,
  };
}

async function udpRows(env: Env, cfg: SuiteConfig, rows: Row[]): Promise<void> {
  for (const size of [64, 1400]) {
    rows.push(
      await compare(
        cfg,
        {
          group: 'udp',
          scenario: `UDP datagrams delivered/s, ${size} B, unlimited`,
          unit: 'pps',
          higherIsBetter: true,
        },
        VARIANTS,
        async (v) => {
          const r = await udpDelivered(env, v, size, cfg.udpMs, 0);
          return { value: r.pps, extra: { deliveredPct: r.deliveredPct } };
        },
      ),
    );
  }
  for (const rate of cfg.udpFixedRates) {
    rows.push(
      await compare(
        cfg,
        {
          group: 'udp',
          scenario: `UDP 512 B at ${rate / 1000}k pps: delivered`,
          unit: '%',
          higherIsBetter: true,
        },
        VARIANTS,
        async (v) => {
          const r = await udpDelivered(env, v, 512, cfg.udpMs, rate);
          return { value: r.deliveredPct };
        },
      ),
    );
  }
}

async function memoryRows(env: Env, cfg: SuiteConfig, rows: Row[]): Promise<void> {
  for (const count of cfg.idleCounts) {
    rows.push(
      await compare(
        cfg,
        {
          group: 'memory',
          scenario: `memory per idle proxied connection, ${count} connections`,
          unit: 'bytes',
          higherIsBetter: false,
        },
        ['naive', 'proxy'],
        async (v) => {
          await env.proxy.call('gc');
          const before = await env.proxy.call<{ rss: number }>('stats');
          const opened = await env.load.call<number>('openIdle', target(env, v, 'tcpEcho'), count);
          await env.proxy.call('gc');
          const after = await env.proxy.call<{ rss: number }>('stats');
          await env.load.call('closeIdle');
          await new Promise((r) => setTimeout(r, 200));
          return { value: (after.rss - before.rss) / opened };
        },
      ),
    );
  }
}

async function syncRows(cfg: SuiteConfig): Promise<SyncCost[]> {
  const out: SyncCost[] = [];
  for (const [services, perService] of cfg.syncSizes) {
    const host = new RoleProcess('proxy'); // a fresh process, so its RSS is this scenario's alone
    try {
      out.push(await host.call<SyncCost>('syncCost', services, perService));
    } finally {
      host.stop();
    }
  }
  return out;
}

async function nextEndpointFigures(): Promise<Record<string, number> | undefined> {
  try {
    const mod = (await import('./next-endpoint.js')) as {
      benchNextEndpoint?: (o?: object) => Promise<Record<string, number>> | Record<string, number>;
    };
    return mod.benchNextEndpoint ? await mod.benchNextEndpoint({ quick: true }) : undefined;
  } catch {
    return undefined;
  }
}

/** Runs the suite: every group in `cfg.only` (or all), each variant interleaved per repetition. */
export async function runSuite(cfg: SuiteConfig): Promise<SuiteResult> {
  const startedAt = new Date().toISOString();
  const want = (g: string) => cfg.only.length === 0 || cfg.only.includes(g);
  const rows: Row[] = [];
  const backend = new RoleProcess('backend');
  const proxy = new RoleProcess('proxy');
  const load = new RoleProcess('load');
  try {
    const ports = await backend.call<BackendPorts>('start');
    const frontends = await proxy.call<Record<'naive' | 'proxy', Frontend>>('start', ports);
    const env: Env = { backend, proxy, load, ports, frontends };
    if (want('tcp')) await tcpRows(env, cfg, rows);
    if (want('latency')) await latencyRows(env, cfg, rows);
    if (want('udp')) await udpRows(env, cfg, rows);
    if (want('memory')) await memoryRows(env, cfg, rows);
  } finally {
    backend.stop();
    proxy.stop();
    load.stop();
  }
  const sync = want('sync') ? await syncRows(cfg) : [];
  const nextEndpoint = want('lb') ? await nextEndpointFigures() : undefined;
  return { rows, sync, ...(nextEndpoint ? { nextEndpoint } : {}), config: cfg, startedAt };
}
