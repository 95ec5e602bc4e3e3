import {
  compare,
  type Env,
  type Measure,
  type Row,
  type SuiteConfig,
  VARIANTS,
  type Variant,
} from './compare.js';
import type { BackendPorts } from './roles/backend.js';
import type { Target } from './roles/loadgen.js';
import type { Frontend } from './roles/proxy-host.js';
import type { SyncCost } from './roles/sync-cost.js';
import { type ProcessStats, RoleProcess } from './rpc.js';

/** The scenario groups of the suite; each appends its rows to `rows`. */

function target(env: Env, v: Variant, port: keyof BackendPorts): Target {
  if (v === 'direct') return { host: '127.0.0.1', port: env.ports[port] };
  const f = env.frontends[v];
  return { host: f.host, port: f.ports[port] };
}

async function proxyCpu(env: Env): Promise<number> {
  return (await env.proxy.call<ProcessStats>('stats')).cpuSeconds;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** TCP bulk transfer (1 and 8 streams) and new connections per second (concurrency 1 and 32). */
export async function tcpRows(env: Env, cfg: SuiteConfig, rows: Row[]): Promise<void> {
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
        env,
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
          const cpu0 = await proxyCpu(env);
          const r = await env.load.call<{
            perSecond: number;
            count: number;
            p50Ms: number;
            p99Ms: number;
            errors: number;
          }>('connRate', target(env, v, 'tcpHttp'), concurrency, cfg.connMs);
          const cpu = (await proxyCpu(env)) - cpu0;
          const extra: Record<string, number> = {
            p50Ms: r.p50Ms,
            p99Ms: r.p99Ms,
            errors: r.errors,
          };
          if (v !== 'direct' && r.count > 0) extra.cpuMsPerConn = (1000 * cpu) / r.count;
          return { value: r.perSecond, extra };
        },
        env,
      ),
    );
  }
}

/** 64-byte ping-pong, TCP and UDP: the median half round trip. */
export async function latencyRows(env: Env, cfg: SuiteConfig, rows: Row[]): Promise<void> {
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
          const r = await env.load.call<{ halfRttUs: number; p99Us: number }>(
            'pingPong',
            target(env, v, port),
            protocol,
            cfg.pingMs,
          );
          return { value: r.halfRttUs, extra: { p99Us: r.p99Us } };
        },
        env,
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
    sentPps: r.sent / r.seconds,
    deliveredPct: r.sent ? (100 * got.datagrams) / r.sent : 0,
  };
}

/** UDP datagrams delivered per second, unlimited, and the share delivered at fixed rates. */
export async function udpRows(env: Env, cfg: SuiteConfig, rows: Row[]): Promise<void> {
  for (const size of cfg.udpSizes) {
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
          return { value: r.pps, extra: { deliveredPct: r.deliveredPct, sentPps: r.sentPps } };
        },
        env,
      ),
    );
  }
  for (const rate of cfg.udpFixedRates) {
    for (const size of cfg.udpSizes) {
      rows.push(
        await compare(
          cfg,
          {
            group: 'udp',
            scenario: `UDP ${size} B at ${rate / 1000}k pps: delivered`,
            unit: '%',
            higherIsBetter: true,
          },
          VARIANTS,
          async (v) => {
            const r = await udpDelivered(env, v, size, cfg.udpMs, rate);
            return { value: r.deliveredPct, extra: { sentPps: r.sentPps } };
          },
          env,
        ),
      );
    }
  }
}

/** Addresses of the memory scenario's own proxy host, apart from the main one's. */
const memOctet = () => 1 + Math.floor(Math.random() * 250);
const MEMORY_HOST = `${memOctet()}.${memOctet()}`;
const MEMORY_HOSTS = { naive: `127.211.${MEMORY_HOST}`, proxy: `127.210.${MEMORY_HOST}` };

/**
 * What `count` more idle proxied connections add to the RSS of a fresh proxy host, per connection.
 * A fresh process per measurement, because one that has just moved gigabytes has heap and malloc
 * slack that idle connections fill without growing RSS (the smoke run read 0 bytes that way). The
 * figure is the marginal cost above `cfg.idleWarm` connections already open: V8
 * grows its young generation and first old-space pages in steps of megabytes while the first
 * connections arrive, and counted from zero that fixed step read as several kilobytes per
 * connection, more or less at random (a bare accepted `net.Socket` read 4–7 KiB from zero and a
 * steady 2.4 KiB above 2 000).
 */
async function idleMemory(env: Env, cfg: SuiteConfig, v: Variant, count: number): Promise<Measure> {
  const host = new RoleProcess('proxy');
  try {
    const fronts = await host.call<Record<'naive' | 'proxy', Frontend>>(
      'start',
      env.ports,
      MEMORY_HOSTS,
    );
    const f = fronts[v === 'direct' ? 'proxy' : v];
    const t: Target = { host: f.host, port: f.ports.tcpEcho };
    const warm = await env.load.call<number>('openIdle', t, cfg.idleWarm);
    await settle(host, cfg.idleSettleMs);
    const before = await host.call<ProcessStats>('stats');
    const opened = (await env.load.call<number>('openIdle', t, count)) - warm;
    await settle(host, cfg.idleSettleMs);
    const after = await host.call<ProcessStats>('stats');
    await env.load.call('closeIdle');
    const heap = after.heapUsed + after.external - (before.heapUsed + before.external);
    return { value: (after.rss - before.rss) / opened, extra: { jsBytes: heap / opened } };
  } finally {
    host.stop();
  }
}

/**
 * Idle means idle: V8 gives back young-generation pages it grew while connections were being
 * opened only once its allocation rate has dropped, as it has in a proxy holding idle connections.
 */
async function settle(host: RoleProcess, ms: number): Promise<void> {
  await sleep(ms);
  await host.call('gc');
  await host.call('gc');
}

/** Memory per idle proxied connection (naive and proxy only: a direct connection has no proxy). */
export async function memoryRows(env: Env, cfg: SuiteConfig, rows: Row[]): Promise<void> {
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
        (v) => idleMemory(env, cfg, v, count),
      ),
    );
  }
}

/** Sync cost, each size in a fresh process so that its RSS is that scenario's alone. */
export async function syncRows(cfg: SuiteConfig): Promise<SyncCost[]> {
  const out: SyncCost[] = [];
  for (const [services, perService] of cfg.syncSizes) {
    const host = new RoleProcess('proxy');
    try {
      out.push(await host.call<SyncCost>('syncCost', services, perService));
    } finally {
      host.stop();
    }
  }
  return out;
}
