import type { DaemonBuild } from './daemon.js';

/**
 * The shapes every reliability probe shares: how big it runs, and what it reports. A probe never
 * decides what "good" is on its own: each figure carries the goal it is held to, taken from issue 12,
 * so the document states the goal beside the measurement and a missed goal shows as a failure.
 */

/** One measured figure and the goal it is held to. */
export interface Figure {
  /** What was measured, e.g. "established connections lost". */
  name: string;
  /** The measurement, as it should be printed. */
  value: string;
  /** The goal, as it should be printed, e.g. "0" or "< 5 ms". */
  goal: string;
  /** Whether the goal was met; undefined for a figure given for context only. */
  pass?: boolean;
}

/** What one probe reports. */
export interface ProbeResult {
  id: string;
  title: string;
  /** What was done, in a sentence or three (sizes included). */
  done: string;
  figures: Figure[];
  /** Anything the reader should know: limits of the machine, a defect found. */
  notes: string[];
  seconds: number;
  /** Set when the probe itself failed to run (then figures may be partial). */
  error?: string;
}

/** The sizes of every probe for one kind of run. */
export interface SoakSizes {
  kind: 'full' | 'quick' | 'smoke';
  churn: { connections: number; changes: number; intervalMs: number };
  halfClose: { connections: number; timeoutS: number };
  udpFlood: { sourcePorts: number; singleSourcePorts: number; sources: number; cap: number };
  fdExhaustion: { nofile: number; cycles: number };
  blackhole: { clients: number };
  fuzz: { inProcess: number; liveManifests: number; liveConfigs: number };
  sigterm: { finishing: number; streaming: number; drainS: number; loadS: number };
  http: { idle: number; slow: number; garbage: number; slowMs: number };
}

/** The goals' sizes: about 20 minutes on 2 loaded cores. */
export const FULL: SoakSizes = {
  kind: 'full',
  churn: { connections: 200, changes: 1000, intervalMs: 0 },
  halfClose: { connections: 9500, timeoutS: 10 },
  udpFlood: { sourcePorts: 100_000, singleSourcePorts: 20_000, sources: 8, cap: 4096 },
  fdExhaustion: { nofile: 256, cycles: 20 },
  blackhole: { clients: 3000 },
  fuzz: { inProcess: 1_000_000, liveManifests: 300, liveConfigs: 60 },
  sigterm: { finishing: 200, streaming: 100, drainS: 5, loadS: 20 },
  http: { idle: 1000, slow: 50, garbage: 500, slowMs: 14_000 },
};

/** About two minutes. */
export const QUICK: SoakSizes = {
  kind: 'quick',
  churn: { connections: 50, changes: 100, intervalMs: 0 },
  halfClose: { connections: 1000, timeoutS: 3 },
  udpFlood: { sourcePorts: 10_000, singleSourcePorts: 3000, sources: 5, cap: 4096 },
  fdExhaustion: { nofile: 256, cycles: 3 },
  blackhole: { clients: 600 },
  fuzz: { inProcess: 50_000, liveManifests: 30, liveConfigs: 5 },
  sigterm: { finishing: 40, streaming: 20, drainS: 3, loadS: 20 },
  http: { idle: 200, slow: 10, garbage: 100, slowMs: 13_000 },
};

/** A few seconds per probe, for `pnpm test`: proves every probe runs end to end. */
export const SMOKE: SoakSizes = {
  kind: 'smoke',
  churn: { connections: 5, changes: 5, intervalMs: 0 },
  halfClose: { connections: 20, timeoutS: 1 },
  udpFlood: { sourcePorts: 300, singleSourcePorts: 100, sources: 5, cap: 64 },
  fdExhaustion: { nofile: 256, cycles: 1 },
  blackhole: { clients: 60 },
  fuzz: { inProcess: 2000, liveManifests: 3, liveConfigs: 1 },
  sigterm: { finishing: 5, streaming: 5, drainS: 1, loadS: 0 },
  http: { idle: 80, slow: 0, garbage: 10, slowMs: 0 },
};

/** What every probe is given. */
export interface ProbeContext {
  sizes: SoakSizes;
  build: DaemonBuild;
  /** Progress lines (stderr in the CLI, silent in the smoke test). */
  log(line: string): void;
  /** The fuzz seed. */
  seed: number;
}

/** A probe. */
export type Probe = (ctx: ProbeContext) => Promise<Omit<ProbeResult, 'seconds'>>;
