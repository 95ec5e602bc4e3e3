import { spawnSync } from 'node:child_process';
import type { Env, Row, SuiteConfig } from './compare.js';
import { IDLER_FULL, IDLER_SMOKE, type IdlerFigures, runIdlerBench } from './idler-bench.js';
import type { BackendPorts } from './roles/backend.js';
import type { Frontend } from './roles/proxy-host.js';
import type { SyncCost } from './roles/sync-cost.js';
import { RoleProcess } from './rpc.js';
import { latencyRows, memoryRows, syncRows, tcpRows, udpRows } from './scenarios.js';
import { sctpRows } from './sctp.js';

export type { CpuUse, Row, SuiteConfig, Variant } from './compare.js';

/** The full suite: about ten minutes on 2 cores. */
export const FULL: SuiteConfig = {
  reps: 5,
  bulkMs: 3000,
  connMs: 3000,
  pingMs: 2000,
  udpMs: 2000,
  udpSizes: [64, 1400],
  udpFixedRates: [20_000, 50_000],
  idleCounts: [1000, 5000],
  idleWarm: 1000,
  idleSettleMs: 2000,
  syncSizes: [
    [1000, 10],
    [10_000, 10],
  ],
  only: [],
  idler: IDLER_FULL,
};

/** A few seconds: proves the harness works end to end (CI runs it as a test). */
export const SMOKE: SuiteConfig = {
  reps: 1,
  bulkMs: 150,
  connMs: 150,
  pingMs: 100,
  udpMs: 150,
  udpSizes: [64],
  udpFixedRates: [2000],
  idleCounts: [50],
  idleWarm: 20,
  idleSettleMs: 50,
  syncSizes: [[20, 2]],
  only: [],
  idler: IDLER_SMOKE,
};

/** Everything one run of the suite measured. */
export interface SuiteResult {
  rows: Row[];
  sync: SyncCost[];
  nextEndpoint?: Record<string, number>;
  /** The idler group: held clients, their memory and the hand-over, on core's TCP socket. */
  idler?: IdlerFigures;
  /**
   * The same on `@userspace-proxy/native`'s helper (`--data-path native`), when this machine has a
   * C compiler to build it.
   */
  idlerNative?: IdlerFigures;
  config: SuiteConfig;
  startedAt: string;
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

/** Whether `cc` runs here: the native helper is compiled on first use. */
function hasCompiler(): boolean {
  return spawnSync('cc', ['--version'], { stdio: 'ignore' }).status === 0;
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
  if (want('sctp')) await sctpRows(cfg, rows);
  const sync = want('sync') ? await syncRows(cfg) : [];
  const nextEndpoint = want('lb') ? await nextEndpointFigures() : undefined;
  const idler = want('idler') ? await runIdlerBench(cfg.idler ?? IDLER_FULL) : undefined;
  const idlerNative =
    want('idler') && hasCompiler()
      ? await runIdlerBench({ ...(cfg.idler ?? IDLER_FULL), dataPath: 'native' })
      : undefined;
  return {
    rows,
    sync,
    ...(nextEndpoint ? { nextEndpoint } : {}),
    ...(idler ? { idler } : {}),
    ...(idlerNative ? { idlerNative } : {}),
    config: cfg,
    startedAt,
  };
}
