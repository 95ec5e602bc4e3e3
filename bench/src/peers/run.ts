import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { addressOf, type Layout, type PeerId, randomLayout } from './configs.js';
import {
  bulk,
  type Ctx,
  connRate,
  type Durations,
  idleRss,
  LineChannel,
  pingPong,
  udp,
} from './measure.js';
import type { MeasureGroup, PeersResult, SubjectId } from './model.js';
import { Processes, stopOnExit } from './processes.js';
import { IDLE_NODE_FLAGS, type RunningPeer, startBackends, startPeer } from './subjects.js';
import { ensureTools, type Tool, versionOf } from './tools.js';

/** Everything `pnpm bench --peers` can be told. */
export interface PeersOptions {
  reps: number;
  quick: boolean;
  /** Groups to run (empty: all). */
  only: MeasureGroup[];
  /** Peers to run (empty: all); direct always runs. */
  peers: PeerId[];
  /** apt-get install what is missing (when root). */
  install: boolean;
  /** The daemon's entry point and extra flags. */
  daemonMain: string;
  daemonArgs: string[];
  /** Flags for the daemon's node before its script (`--daemon-node-arg`). */
  daemonNodeArgs: string[];
  /** Progress lines. */
  log: (s: string) => void;
}

/** Durations of a full run: about 15 minutes for 3 repetitions on 2 cores. */
export const FULL_DURATIONS: Durations = {
  seconds: 3,
  idleFrom: 3000,
  idleTo: 9000,
  idleSettleMs: 2000,
};
/** `--quick`: every measure once for a second, a small idle test: about two minutes. */
export const QUICK_DURATIONS: Durations = {
  seconds: 1,
  idleFrom: 200,
  idleTo: 600,
  idleSettleMs: 500,
};

/** The offered rate of the loss measures. */
const FIXED_PPS = 50_000;

const ALL_PEERS: readonly PeerId[] = ['haproxy', 'nginx', 'naive', 'daemon', 'daemon2', 'native'];

/** `list` rotated left by `k`: the order subjects run in changes every repetition. */
export function rotate<T>(list: readonly T[], k: number): T[] {
  if (list.length === 0) return [];
  const s = ((k % list.length) + list.length) % list.length;
  return [...list.slice(s), ...list.slice(0, s)];
}

/** One measurement for one subject: what it records, under which measure ids. */
type Step = (
  subject: SubjectId,
  address: string,
  peer: RunningPeer | undefined,
) => Promise<Record<string, number | null>>;

/**
 * Runs the benchmark: tools checked (installed when missing and allowed), backends and every peer
 * started on a random loopback /24, then repetition by repetition each measure on every subject in
 * turn (the order rotating), direct included, so each repetition pairs a subject with a direct
 * figure taken a minute or two before or after it. Every server is stopped at the end, also on
 * error or Ctrl-C.
 */
export async function runPeers(opts: PeersOptions): Promise<PeersResult> {
  const startedAt = new Date().toISOString();
  const loadStart = os.loadavg()[0] ?? 0;
  const notes: string[] = [];
  const box = ensureTools(opts.install, (s) => {
    opts.log(s);
    notes.push(s);
  });
  const versions: Record<string, string> = { node: process.version };
  for (const t of Object.keys(box.paths) as Tool[]) {
    const p = box.paths[t];
    if (p) versions[t] = versionOf(t, p);
  }
  const dur = opts.quick ? QUICK_DURATIONS : FULL_DURATIONS;
  const procs = new Processes();
  const dir = mkdtempSync(join(os.tmpdir(), 'bench-peers-'));
  const unhook = stopOnExit(procs, () => rmSync(dir, { recursive: true, force: true }));
  const layout: Layout = randomLayout();
  const samples: PeersResult['samples'] = {};
  const subjects: SubjectId[] = ['direct'];
  const record = (id: string, subject: SubjectId, rep: number, value: number | null) => {
    const row = samples[id] ?? {};
    samples[id] = row;
    const series = row[subject] ?? Array.from({ length: opts.reps }, (): number | null => null);
    series[rep] = value;
    row[subject] = series;
  };
  try {
    opts.log(`backends on ${layout.backend}; run directory ${dir}`);
    const backends = await startBackends(procs, box, layout, dir, notes);
    const holder = new LineChannel(backends.holder);
    const peers = new Map<PeerId, RunningPeer>();
    const daemon = {
      main: opts.daemonMain,
      extraArgs: opts.daemonArgs,
      nodeArgs: opts.daemonNodeArgs,
    };
    for (const id of opts.peers.length ? opts.peers : ALL_PEERS) {
      const peer = await startPeer(id, procs, box, layout, dir, daemon, notes);
      if (peer) {
        peers.set(id, peer);
        subjects.push(id);
        opts.log(`${id} up on ${peer.address} (pid ${peer.pid})`);
      }
    }
    // A peer restarted for the idle test replaces the old one for every later measurement.
    const restart = async (
      old: RunningPeer,
      nodeFlags: readonly string[] = [],
    ): Promise<RunningPeer> => {
      await procs.stop(old.child);
      const fresh = await startPeer(old.id, procs, box, layout, dir, daemon, notes, nodeFlags);
      if (!fresh) throw new Error(`${old.id} did not come back after its restart`);
      peers.set(old.id, fresh);
      return fresh;
    };
    const ctx: Ctx = { procs, box, dur };
    const steps = plan(ctx, backends.ok, holder, restart, notes, opts.only);
    for (let rep = 0; rep < opts.reps; rep++) {
      for (const [i, step] of steps.entries()) {
        const order = rotate(subjects, rep + i);
        for (const subject of order) {
          const peer = subject === 'direct' ? undefined : peers.get(subject);
          if (!step.applies(subject, peer)) continue;
          const label = `rep ${rep + 1}/${opts.reps} ${step.name} ${subject}`;
          try {
            const got = await step.run(subject, addressOf(layout, subject), peer);
            for (const [id, v] of Object.entries(got)) record(id, subject, rep, v);
            opts.log(
              `${label}: ${Object.entries(got)
                .map(([k, v]) => `${k}=${v === null ? '–' : +v.toPrecision(4)}`)
                .join(' ')}`,
            );
          } catch (err) {
            const msg = `${label} failed: ${(err as Error).message}`.slice(0, 600);
            notes.push(msg);
            opts.log(msg);
          }
        }
      }
    }
  } finally {
    await procs.stopAll();
    unhook();
    rmSync(dir, { recursive: true, force: true });
  }
  return {
    startedAt,
    finishedAt: new Date().toISOString(),
    reps: opts.reps,
    quick: opts.quick,
    subjects,
    samples,
    versions,
    method: methodText(dur),
    load: { start: loadStart, end: os.loadavg()[0] ?? 0 },
    notes,
  };
}

function methodText(d: Durations): string {
  return `Each iperf3, wrk and sockperf run lasts ${d.seconds} s; the idle test holds ${d.idleFrom} then ${d.idleTo} connections (${d.idleSettleMs} ms settling; Node subjects restarted for it with \`node ${IDLE_NODE_FLAGS.join(' ')}\`, so that V8's young generation, sized by the recent allocation rate, stays put between the two readings); ${os.cpus().length} cores.`;
}

interface PlannedStep {
  name: string;
  group: MeasureGroup;
  applies(subject: SubjectId, peer: RunningPeer | undefined): boolean;
  run: Step;
}

/** The measurements in run order, each limited to the subjects and tools it can use. */
function plan(
  ctx: Ctx,
  ok: { iperf: boolean; http: boolean; sockperf: boolean },
  holder: LineChannel,
  restart: (peer: RunningPeer, nodeFlags?: readonly string[]) => Promise<RunningPeer>,
  notes: string[],
  only: MeasureGroup[],
): PlannedStep[] {
  const any = () => true;
  const udpOk = (_s: SubjectId, p: RunningPeer | undefined) => !p || p.udp;
  const proxies = (s: SubjectId) => s !== 'direct';
  const steps: PlannedStep[] = [];
  const add = (name: string, group: MeasureGroup, applies: PlannedStep['applies'], run: Step) => {
    if (only.length === 0 || only.includes(group)) steps.push({ name, group, applies, run });
  };
  const skipped = (what: string, tool: string) => {
    if (only.length === 0 || only.includes(what as MeasureGroup)) {
      notes.push(`${tool} is not available: the ${what} measures are skipped.`);
    }
  };
  if (ok.iperf) {
    for (const streams of [1, 8]) {
      add(`TCP bulk ×${streams}`, 'bulk', any, async (_s, address, peer) => {
        const r = await bulk(ctx, address, streams, peer?.pid);
        return { [`tcp${streams}`]: r.gbps, [`cpu${streams}`]: r.cpuPerGB };
      });
    }
  } else skipped('bulk', 'iperf3');
  if (ok.http && ctx.box.paths.wrk) {
    for (const c of [1, 32]) {
      add(`conn/s c=${c}`, 'conn', any, async (s, address) => ({
        [`conn${c}`]: await connRate(ctx, address, c, notes, s),
      }));
    }
  } else skipped('conn', 'wrk (or its nginx backend)');
  if (ok.iperf) {
    for (const size of [64, 1400]) {
      add(`UDP ${size} B unlimited`, 'udp', udpOk, async (_s, address) => ({
        [`udp${size}`]: (await udp(ctx, address, size, 0)).deliveredPps,
      }));
    }
    for (const size of [64, 1400]) {
      add(`UDP ${size} B at 50k pps`, 'loss', udpOk, async (s, address) => {
        const r = await udp(ctx, address, size, FIXED_PPS);
        if (r.offeredPps < FIXED_PPS * 0.9) {
          notes.push(
            `${s}, UDP ${size} B at 50 000 pps: iperf3 offered only ${Math.round(r.offeredPps)} pps.`,
          );
        }
        return { [`loss${size}`]: r.lostPercent };
      });
    }
  } else {
    skipped('udp', 'iperf3');
    skipped('loss', 'iperf3');
  }
  if (ok.sockperf) {
    add('ping-pong TCP', 'ping', any, async (_s, address) => ({
      rttTcp: await pingPong(ctx, address, 'tcp'),
    }));
    add('ping-pong UDP', 'ping', udpOk, async (_s, address) => ({
      rttUdp: await pingPong(ctx, address, 'udp'),
    }));
  } else skipped('ping', 'sockperf');
  // On a freshly started peer: a process that has held 9 000 connections before keeps its pools
  // (HAProxy's read 3.4 KB per connection once, then 0), so a second measurement would see no growth.
  // Node subjects run it with their young generation pinned (IDLE_NODE_FLAGS), and are started again
  // as configured afterwards, so the next repetition's data path runs with the flags users run.
  add('idle RSS', 'idle', proxies, async (_s, address, peer) => {
    if (!peer) return { idleRss: null };
    const fresh = await restart(peer, IDLE_NODE_FLAGS);
    try {
      return { idleRss: await idleRss(ctx, address, fresh.pid, holder) };
    } finally {
      await restart(fresh);
    }
  });
  return steps;
}
