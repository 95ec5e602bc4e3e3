import { loadavg } from 'node:os';
import {
  hasCC,
  type IdlerArrivals,
  type IdlerBackend,
  NativeIdlerBackend,
} from './roles/idler-native-backend.js';
import type { IdlerMemory } from './roles/idler-roles.js';
import { RoleProcess } from './rpc.js';

/**
 * The idler group of `pnpm bench`: `held` TCP clients held by the idling sockets of one Idler
 * across `ports` Service ports with no endpoints, then one endpoint event per port. Three
 * processes (bench/src/roles/idler-roles.ts): the proxy's RSS is its own, and 10 000 clients and
 * their backend legs are not in the proxy's 20 000 descriptors. The backend ends each connection
 * after its first byte, so the proxy needs one descriptor per held client plus at most
 * `handOverConcurrency` dials and the few relays still closing: 10 000 held fit.
 */
export interface IdlerBenchOptions {
  held: number;
  ports: number;
  /** The Idler's bound on hand-over dials in flight (default: the Idler's, 256). */
  handOverConcurrency?: number;
  /** How long the hand-over may take before the run reports what had arrived. */
  timeoutMs?: number;
  /**
   * The idling sockets' data path: core's TCP socket (`node`, the default) or
   * `@userspace-proxy/native`'s helper (`native`: it holds the clients and dials; `--data-path native`).
   */
  dataPath?: 'node' | 'native';
  /**
   * The backend's listeners: one per Service port (`per-service`, the default: Services each have
   * pods of their own) or `one` shared by all 100 Services, as before 2 December 2026 (its accept
   * queue, capped by `somaxconn`, overflows during the hand-over's burst and failed first dials
   * wait out their 250 ms timeout; `--one-backend-port`).
   */
  backendListeners?: 'per-service' | 'one';
  /**
   * The backend program: `native` (bench/native/idler-backend.c, built with `cc`: the default
   * wherever `cc` runs, since on a cluster the backend pods do not share the proxy's cores, and a
   * Node backend spends about as much of this machine's 2 cores as the proxy does) or `node` (the
   * `idler-backend` role; `--node-backend`, and the fallback without `cc`).
   */
  backend?: 'native' | 'node';
  /** More Node/V8 flags for the proxy process only (`--node-arg --max-semi-space-size=1`). */
  nodeArgs?: readonly string[];
  /**
   * Also read the memory with every client still held after this long without traffic (ms;
   * `--settle-ms`, 0 = not): V8 gives back its young generation's growth at a collection that
   * sees a low allocation rate, so this is what a proxy holding clients for minutes keeps.
   */
  settleMs?: number;
}

/** What one run measured. */
export interface IdlerFigures {
  held: number;
  ports: number;
  dataPath: 'node' | 'native';
  /**
   * (RSS with every client held − RSS with the sockets open and none held) / held, bytes: of the
   * process tree (Node + the native helper).
   */
  rssPerHeld: number;
  /** The native helper's part of `rssPerHeld` (0 on the Node path). */
  helperRssPerHeld: number;
  /** The part of that growth that is V8's young generation committing more (a one-off step). */
  youngGrowthPerHeld: number;
  /** JS heap in use per held client, bytes. */
  heapPerHeld: number;
  /** `rssPerHeld` read again after `settleMs` without traffic (undefined without `settleMs`). */
  settledRssPerHeld?: number;
  /** `youngGrowthPerHeld` at the same time. */
  settledYoungGrowthPerHeld?: number;
  /** The proxy's extra Node/V8 flags in this run. */
  nodeArgs: readonly string[];
  /** Publishing the endpoint events, ms. */
  eventsMs: number;
  /** From the first endpoint event to the last held client's first byte at its backend, ms. */
  lastFirstByteMs: number;
  firstBytes: number;
  handedOver: number;
  handOverFailures: number;
  dialErrors: number;
  /**
   * The proxy's CPU time from the endpoint events until the last first byte had arrived (and the
   * counters were read), ms: on a loaded machine the wall-clock time is this plus the waits for a
   * core, so it says what the time would be on a quiet one.
   */
  handOverCpuMs: number;
  /** The native helper's part of `handOverCpuMs` (0 on the Node path). */
  helperCpuMs: number;
  /**
   * The backend process's CPU over the same time (it accepts, reads a byte and ends each of the
   * connections): on a 2-core machine it competes with the proxy for the cores.
   */
  backendCpuMs: number;
  /** The Idler's bound on hand-over dials in flight in this run. */
  handOverConcurrency: number;
  /** The backend's listeners in this run (see IdlerBenchOptions). */
  backendListeners: 'per-service' | 'one';
  /** The backend program in this run (see IdlerBenchOptions). */
  backend: 'native' | 'node';
  loadAverage: number;
}

/** Sizes: the issue's (10 000 clients across 100 Service ports) and a smoke run's. */
export const IDLER_FULL: IdlerBenchOptions = { held: 10_000, ports: 100 };
export const IDLER_SMOKE: IdlerBenchOptions = { held: 200, ports: 10 };

/** The Node backend role behind the same calls as the C one. */
function nodeBackend(): IdlerBackend {
  const role = new RoleProcess('idler-backend');
  return {
    start: (count, listeners) => role.call('start', count, listeners),
    waitAll: (timeoutMs) => role.call<IdlerArrivals>('waitAll', timeoutMs),
    stop: () => role.stop(),
  };
}

let noCcNoted = false;

/** The backend a run asked for; `native` without `cc` falls back to Node's, saying so once. */
function chooseBackend(wanted: 'native' | 'node' | undefined): 'native' | 'node' {
  if (wanted === 'node') return 'node';
  if (hasCC()) return 'native';
  if (!noCcNoted) {
    noCcNoted = true;
    console.log('idler bench: no `cc` here, so the backend is the Node one (--node-backend)');
  }
  return 'node';
}

/** Runs the idler benchmark once, in three fresh processes. */
export async function runIdlerBench(opts: IdlerBenchOptions): Promise<IdlerFigures> {
  const perPort = Math.ceil(opts.held / opts.ports);
  const held = perPort * opts.ports;
  const backendKind = chooseBackend(opts.backend);
  const proxy = new RoleProcess('idler-proxy', { nodeArgs: opts.nodeArgs ?? [] });
  const clients = new RoleProcess('idler-clients');
  const backend = backendKind === 'native' ? new NativeIdlerBackend() : nodeBackend();
  try {
    const backendListeners = opts.backendListeners ?? 'per-service';
    const target = await backend.start(held, backendListeners === 'one' ? 1 : opts.ports);
    const front = await proxy.call<{ ip: string; ports: number[] }>(
      'start',
      opts.ports,
      perPort,
      opts.handOverConcurrency,
      opts.dataPath ?? 'node',
    );
    const before = await proxy.call<IdlerMemory>('memory');
    const settleMs = opts.settleMs ?? 0;
    // The settled reading's baseline is settled too: the young generation V8 starts with is not
    // the one it shrinks back to.
    const beforeSettled =
      settleMs > 0 ? await proxy.call<IdlerMemory>('memory', settleMs) : undefined;
    await clients.call('connect', front.ip, front.ports, perPort);
    const deadline = Date.now() + 60_000;
    while ((await proxy.call<number>('held')) < held) {
      if (Date.now() > deadline) throw new Error('the idler did not hold every client in 60 s');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const after = await proxy.call<IdlerMemory>('memory');
    const settled = settleMs > 0 ? await proxy.call<IdlerMemory>('memory', settleMs) : undefined;
    const arrived = backend.waitAll(opts.timeoutMs ?? 60_000);
    const start = await proxy.call<{ t0: number; eventsMs: number }>(
      'handOver',
      target.ip,
      target.ports,
    );
    const end = await arrived;
    const stats = await proxy.call<{
      handedOver: number;
      handOverFailures: number;
      dialErrors: number;
      cpuSeconds: number;
      helperCpuSeconds: number;
    }>('stats');
    await proxy.call('stop');
    return {
      held,
      ports: opts.ports,
      dataPath: opts.dataPath ?? 'node',
      rssPerHeld: (after.rss + after.helperRss - before.rss - before.helperRss) / held,
      helperRssPerHeld: (after.helperRss - before.helperRss) / held,
      youngGrowthPerHeld: (after.newSpace - before.newSpace) / held,
      heapPerHeld: (after.heapUsed - before.heapUsed) / held,
      ...(settled === undefined || beforeSettled === undefined
        ? {}
        : {
            settledRssPerHeld:
              (settled.rss + settled.helperRss - beforeSettled.rss - beforeSettled.helperRss) /
              held,
            settledYoungGrowthPerHeld: (settled.newSpace - beforeSettled.newSpace) / held,
          }),
      nodeArgs: opts.nodeArgs ?? [],
      eventsMs: start.eventsMs,
      lastFirstByteMs: end.lastAt - start.t0,
      firstBytes: end.firstBytes,
      handedOver: stats.handedOver,
      handOverFailures: stats.handOverFailures,
      dialErrors: stats.dialErrors,
      handOverCpuMs: (stats.cpuSeconds + stats.helperCpuSeconds) * 1000,
      helperCpuMs: stats.helperCpuSeconds * 1000,
      backendCpuMs: end.cpuMs,
      handOverConcurrency: opts.handOverConcurrency ?? 256,
      backendListeners,
      backend: backendKind,
      loadAverage: loadavg()[0] ?? 0,
    };
  } finally {
    proxy.stop();
    clients.stop();
    backend.stop();
  }
}

const n = (v: number, digits = 0) =>
  v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** The run as Markdown lines (the suite's report and docs/benchmarks.md). */
export function idlerMarkdown(runs: readonly IdlerFigures[]): string[] {
  const lines = [
    '| held clients / Service ports | RSS per held client | of which young-generation growth | JS heap per held client | endpoint events → last first byte at the backend | proxy CPU in that time | backend CPU | first bytes | failed dial attempts | load average |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of runs) {
    const native = r.dataPath === 'native';
    const parts = [
      ...(native ? [`native, ${n(r.handOverConcurrency)} dials`] : []),
      ...(r.backendListeners === 'one' ? ['one backend port'] : []),
      ...(r.backend === 'node' ? ['Node backend'] : []),
      ...r.nodeArgs.map((flag) => `\`${flag}\``),
    ];
    const where = parts.length > 0 ? ` (${parts.join(', ')})` : '';
    const settled =
      r.settledRssPerHeld === undefined
        ? ''
        : `; ${n(r.settledRssPerHeld / 1024, 2)} KiB settled (young generation ${n((r.settledYoungGrowthPerHeld ?? 0) / 1024, 2)})`;
    const helperRss = `${native ? ` (helper ${n(r.helperRssPerHeld / 1024, 2)})` : ''}${settled}`;
    const helperCpu = native ? ` (helper ${n(r.helperCpuMs)})` : '';
    lines.push(
      `| ${n(r.held)} / ${n(r.ports)}${where} | ${n(r.rssPerHeld / 1024, 2)} KiB${helperRss} | ${n(r.youngGrowthPerHeld / 1024, 2)} KiB | ${n(r.heapPerHeld / 1024, 2)} KiB | ${n(r.lastFirstByteMs)} ms | ${n(r.handOverCpuMs)} ms${helperCpu} | ${n(r.backendCpuMs)} ms | ${n(r.firstBytes)} | ${n(r.dialErrors)} | ${n(r.loadAverage, 1)} |`,
    );
  }
  return lines;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const num = (flag: string, def: number) => {
    const i = args.indexOf(flag);
    return i >= 0 ? Number(args[i + 1]) : def;
  };
  // --built: the proxy runs the packages' dist (what users run; `pnpm build` first), not the
  // TypeScript sources through tsx, whose keepNames wrapper alone costs several per cent of CPU.
  if (args.includes('--built')) process.env.BENCH_BUILT = '1';
  const base = args.includes('--smoke') ? IDLER_SMOKE : IDLER_FULL;
  const reps = num('--reps', 1);
  const runs: IdlerFigures[] = [];
  for (let i = 0; i < reps; i++) {
    const concurrency = num('--concurrency', 0);
    // --node-arg FLAG (repeatable): a Node/V8 flag for the proxy process only.
    const nodeArgs = args.flatMap((a, j) => (a === '--node-arg' ? [args[j + 1] ?? ''] : []));
    const settleMs = num('--settle-ms', 0);
    runs.push(
      await runIdlerBench({
        held: num('--held', base.held),
        ports: num('--ports', base.ports),
        ...(concurrency > 0 ? { handOverConcurrency: concurrency } : {}),
        ...(args[args.indexOf('--data-path') + 1] === 'native' && args.includes('--data-path')
          ? { dataPath: 'native' as const }
          : {}),
        ...(args.includes('--one-backend-port') ? { backendListeners: 'one' as const } : {}),
        ...(args.includes('--node-backend') ? { backend: 'node' as const } : {}),
        ...(nodeArgs.length > 0 ? { nodeArgs } : {}),
        ...(settleMs > 0 ? { settleMs } : {}),
      }),
    );
    console.log(JSON.stringify(runs.at(-1)));
  }
  console.log(idlerMarkdown(runs).join('\n'));
}
