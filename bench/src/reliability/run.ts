import { readFileSync } from 'node:fs';
import { cpus, hostname, loadavg, totalmem } from 'node:os';
import { blackholeProbe } from './probe-blackhole.js';
import { churnProbe } from './probe-churn.js';
import { fdExhaustionProbe } from './probe-fd-exhaustion.js';
import { fuzzProbe } from './probe-fuzz.js';
import { halfCloseProbe } from './probe-half-close.js';
import { httpProbe } from './probe-http.js';
import { sigtermProbe } from './probe-sigterm.js';
import { udpFloodProbe } from './probe-udp-flood.js';
import type { Probe, ProbeContext, ProbeResult } from './types.js';

/** Every probe, in the order they run and appear in docs/reliability.md. */
export const PROBES: ReadonlyArray<readonly [string, Probe]> = [
  ['churn', churnProbe],
  ['half-close', halfCloseProbe],
  ['udp-flood', udpFloodProbe],
  ['fd-exhaustion', fdExhaustionProbe],
  ['blackhole', blackholeProbe],
  ['fuzz', fuzzProbe],
  ['sigterm', sigtermProbe],
  ['http', httpProbe],
];

/** Where and when a run happened: the document states it, since a loaded machine is normal here. */
export interface RunInfo {
  startedAt: string;
  finishedAt: string;
  host: string;
  cpus: string;
  memoryGiB: number;
  node: string;
  loadBefore: number[];
  loadAfter: number[];
  nofile: string;
  kind: string;
  seed: number;
}

/** A whole run. */
export interface SoakResult {
  info: RunInfo;
  probes: ProbeResult[];
}

function nofileLimit(): string {
  try {
    const text = readFileSync('/proc/self/limits', 'utf8');
    const m = /Max open files\s+(\S+)\s+(\S+)/.exec(text);
    return m ? `${m[1]} soft / ${m[2]} hard` : 'unknown';
  } catch {
    return 'unknown';
  }
}

/** Runs the probes named in `only` (all when empty), one after another, and collects their results. */
export async function runSoak(ctx: ProbeContext, only: string[] = []): Promise<SoakResult> {
  const startedAt = new Date().toISOString();
  const loadBefore = loadavg();
  const probes: ProbeResult[] = [];
  for (const [id, probe] of PROBES) {
    if (only.length > 0 && !only.includes(id)) continue;
    ctx.log(`${id}: starting`);
    const t0 = performance.now();
    try {
      const r = await probe(ctx);
      probes.push({ ...r, seconds: (performance.now() - t0) / 1000 });
    } catch (err) {
      const error = err instanceof Error ? (err.stack ?? err.message) : String(err);
      probes.push({
        id,
        title: id,
        done: '',
        figures: [],
        notes: [],
        error,
        seconds: (performance.now() - t0) / 1000,
      });
    }
    const last = probes[probes.length - 1] as ProbeResult;
    ctx.log(`${id}: done in ${last.seconds.toFixed(1)} s${last.error ? ` (error)` : ''}`);
  }
  const cpu = cpus();
  return {
    info: {
      startedAt,
      finishedAt: new Date().toISOString(),
      host: hostname(),
      cpus: `${cpu.length} × ${cpu[0]?.model ?? 'unknown'}`,
      memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
      node: process.version,
      loadBefore,
      loadAfter: loadavg(),
      nofile: nofileLimit(),
      kind: ctx.sizes.kind,
      seed: ctx.seed,
    },
    probes,
  };
}
