/**
 * What `pnpm bench --peers` measures and on what: the subjects, the measures, and the shape of one
 * run's result. Shared by the runner, the report and the tests, so that a measure added here shows up
 * in the table and the chart without touching either.
 */

/** Who carries the traffic: nobody (direct), a peer proxy, or the project's daemon. */
/**
 * Who carries the traffic: nobody (direct), a peer proxy, or the project's daemon — `daemon` with
 * `--workers 1` (one process), `daemon2` with `--workers 2`, and `native` with `--data-path native`
 * (the C helper relays TCP on every core), so one run shows all three.
 */
export type SubjectId = 'direct' | 'haproxy' | 'nginx' | 'naive' | 'daemon' | 'daemon2' | 'native';

/** Every subject in table order; direct first because every ratio is to it. */
export const SUBJECTS: readonly SubjectId[] = [
  'direct',
  'haproxy',
  'nginx',
  'naive',
  'daemon',
  'daemon2',
  'native',
];

/** Column headings. */
export const SUBJECT_LABELS: Readonly<Record<SubjectId, string>> = {
  direct: 'direct',
  haproxy: 'HAProxy',
  nginx: 'nginx stream',
  naive: 'naive Node',
  daemon: 'userspace-proxy',
  daemon2: 'userspace-proxy, 2 workers',
  native: 'userspace-proxy, native data path',
};

/**
 * How a measure is reported. `ratio`: higher is better, subject ÷ direct of the same repetition.
 * `latency`: lower is better, shown as `1.4×` direct. `absolute`: a figure of the subject alone
 * (CPU per GB, loss, memory), where a ratio to direct means nothing.
 */
export type MeasureKind = 'ratio' | 'latency' | 'absolute';

/** Which tool invocation a measure comes from; also the names `--only` accepts. */
export type MeasureGroup = 'bulk' | 'conn' | 'udp' | 'loss' | 'ping' | 'idle';

/** Every group, in run order. */
export const GROUPS: readonly MeasureGroup[] = ['bulk', 'conn', 'udp', 'loss', 'ping', 'idle'];

/** One row of the table. */
export interface MeasureDef {
  id: string;
  label: string;
  /** The unit of the absolute figure. */
  unit: string;
  kind: MeasureKind;
  group: MeasureGroup;
  /** False where direct has no such figure (no proxy process: CPU, memory). */
  direct: boolean;
  /** False for the measures UDP-less subjects (HAProxy) cannot carry. */
  tcpOnly: boolean;
}

/** The rows, in order. */
export const MEASURES: readonly MeasureDef[] = [
  m('tcp1', 'TCP bulk, 1 stream', 'Gbit/s', 'ratio', 'bulk'),
  m('tcp8', 'TCP bulk, 8 streams', 'Gbit/s', 'ratio', 'bulk'),
  m('cpu1', 'proxy CPU-s per GB, 1 stream', 's/GB', 'absolute', 'bulk', false),
  m('cpu8', 'proxy CPU-s per GB, 8 streams', 's/GB', 'absolute', 'bulk', false),
  m('conn1', 'new connections/s, c=1', 'conn/s', 'ratio', 'conn'),
  m('conn32', 'new connections/s, c=32', 'conn/s', 'ratio', 'conn'),
  m('udp64', 'UDP 64 B unlimited, delivered', 'pps', 'ratio', 'udp', true, false),
  m('udp1400', 'UDP 1 400 B unlimited, delivered', 'pps', 'ratio', 'udp', true, false),
  m('loss64', 'UDP 64 B at 50 000 pps, loss', '%', 'absolute', 'loss', true, false),
  m('loss1400', 'UDP 1 400 B at 50 000 pps, loss', '%', 'absolute', 'loss', true, false),
  m('rttTcp', '64 B half round trip, TCP', 'µs', 'latency', 'ping'),
  m('rttUdp', '64 B half round trip, UDP', 'µs', 'latency', 'ping', true, false),
  m('idleRss', 'RSS per idle proxied connection', 'KB', 'absolute', 'idle', false),
];

function m(
  id: string,
  label: string,
  unit: string,
  kind: MeasureKind,
  group: MeasureGroup,
  direct = true,
  tcpOnly = true,
): MeasureDef {
  return { id, label, unit, kind, group, direct, tcpOnly };
}

/** One figure per repetition; `null` where that repetition has none (skipped or failed). */
export type Series = (number | null)[];

/** Everything one run measured, as the report needs it. */
export interface PeersResult {
  startedAt: string;
  finishedAt: string;
  reps: number;
  quick: boolean;
  /** Subjects that ran (a missing tool removes one). */
  subjects: SubjectId[];
  /** measure id → subject → one value per repetition. */
  samples: Record<string, Partial<Record<SubjectId, Series>>>;
  /** Versions of the tools and peers, for the record. */
  versions: Record<string, string>;
  /** What the run parameters were, as a sentence (durations, K of the idle test). */
  method: string;
  /** Load average when the run started and ended (1-minute). */
  load: { start: number; end: number };
  /** Skipped subjects and tools, failed measurements. */
  notes: string[];
}
