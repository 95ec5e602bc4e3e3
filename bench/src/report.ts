import os from 'node:os';
import { idlerMarkdown } from './idler-bench.js';
import type { Stat } from './stats.js';
import type { CpuUse, Row, SuiteResult } from './suite.js';

const fmt = (x: number): string =>
  x >= 1000 ? Math.round(x).toLocaleString('en-US') : x >= 10 ? x.toFixed(1) : x.toFixed(2);
const cell = (s: Stat | undefined, unit = ''): string =>
  s ? `${fmt(s.median)}${unit} (${fmt(s.min)}–${fmt(s.max)})` : '–';
const ratio = (s: Stat | undefined, higher: boolean): string =>
  s
    ? `${higher ? s.median.toFixed(2) : `${s.median.toFixed(2)}×`} (${s.min.toFixed(2)}–${s.max.toFixed(2)})`
    : '–';

function extraText(row: Row): string {
  const parts: string[] = [];
  for (const v of ['naive', 'proxy', 'direct'] as const) {
    const e = row.extra[v];
    if (!e) continue;
    const bits = Object.entries(e)
      .filter(([k]) => k !== 'errors' || (e[k] ?? 0) > 0)
      .map(([k, x]) => `${k} ${fmt(x)}`);
    if (bits.length) parts.push(`${v}: ${bits.join(', ')}`);
  }
  return parts.join('; ');
}

/** A target of the performance pass and whether this run met it. */
export interface TargetCheck {
  what: string;
  goal: string;
  measured: string;
  met: boolean | undefined;
}

/** Evaluates the issue's performance targets against one run. */
export function checkTargets(r: SuiteResult): TargetCheck[] {
  const row = (prefix: string) => r.rows.find((x) => x.scenario.startsWith(prefix));
  const out: TargetCheck[] = [];
  const add = (
    what: string,
    goal: string,
    value: number | undefined,
    ok: (x: number) => boolean,
    unit = '',
  ) =>
    out.push({
      what,
      goal,
      measured: value === undefined ? 'not run' : `${fmt(value)}${unit}`,
      met: value === undefined ? undefined : ok(value),
    });
  add(
    'TCP bulk, 1 stream, proxy/direct',
    '≥ 0.40',
    row('TCP bulk, 1')?.ratios.proxy?.median,
    (x) => x >= 0.4,
  );
  add(
    'new connections/s at concurrency 32, proxy/direct',
    '≥ 0.50',
    row('new connections/s, concurrency 32')?.ratios.proxy?.median,
    (x) => x >= 0.5,
  );
  const udp50 = r.rows
    .filter((x) => x.scenario.includes('at 50k pps'))
    .map((x) => x.values.proxy?.median ?? 0);
  add(
    'UDP at 50k pps delivered (worst size)',
    '≥ 99.7 %',
    udp50.length ? Math.min(...udp50) : undefined,
    (x) => x >= 99.7,
    ' %',
  );
  add(
    'TCP half round trip, proxy/direct',
    '≤ 1.5×',
    row('64 B half round trip, TCP')?.ratios.proxy?.median,
    (x) => x <= 1.5,
    '×',
  );
  const mem = r.rows.filter((x) => x.group === 'memory').at(-1);
  add(
    'memory per idle proxied connection',
    '≤ 6 KiB',
    mem?.values.proxy?.median,
    (x) => x <= 6144,
    ' B',
  );
  // Each SCTP I/O the run measured: node:dgram (always listed) and the C UDP helper (when it ran).
  for (const [io, suffix] of [
    ['', ''],
    [' (UDP helper)', ', proxy on the UDP helper'],
  ] as const) {
    const exact = (s: string) => r.rows.find((x) => x.scenario === `${s}${suffix}`);
    const sctpSmall = exact('SCTP 100 B messages, one association');
    const sctpLarge = exact('SCTP 64 KiB messages, one association');
    if (io !== '' && sctpSmall === undefined && sctpLarge === undefined) continue;
    add(
      `SCTP 100 B messages through the proxy${io}`,
      '≥ 20 000 msg/s',
      sctpSmall?.values.proxy?.median,
      (x) => x >= 20_000,
      ' msg/s',
    );
    add(
      `SCTP 64 KiB messages through the proxy${io}`,
      '≥ 50 MB/s',
      sctpLarge?.values.proxy?.median,
      (x) => x >= 50,
      ' MB/s',
    );
    for (const [what, x] of [
      [`SCTP 100 B, proxy/direct${io}`, sctpSmall],
      [`SCTP 64 KiB, proxy/direct${io}`, sctpLarge],
    ] as const)
      add(what, '≥ 0.50', x?.ratios.proxy?.median, (v) => v >= 0.5);
  }
  const s10k = r.sync.find((s) => s.services >= 10_000);
  add('10k Services programmed', '< 2 s', s10k?.programMs, (x) => x < 2000, ' ms');
  const small = r.sync[0];
  const large = r.sync.at(-1);
  if (small && large && large !== small) {
    const k = large.endpointChangeUs / Math.max(small.endpointChangeUs, 0.001);
    add(
      `one endpoint change, ${large.services} vs ${small.services} Services`,
      'independent of Services (≤ 2×)',
      k,
      (x) => x <= 2,
      '×',
    );
  }
  for (const [path, figures] of [
    ['node', r.idler],
    ['native', r.idlerNative],
  ] as const) {
    // The Node path's rows are always listed (unmeasured: "–"); the native path's when it ran.
    if (path === 'native' && figures === undefined) continue;
    const idler = figures && figures.held >= 10_000 ? figures : undefined;
    add(
      `idler (${path} path): RSS per held client, 10 000 held (young-generation step excluded)`,
      '≤ 3 KiB',
      idler && (idler.rssPerHeld - idler.youngGrowthPerHeld) / 1024,
      (x) => x <= 3,
      ' KiB',
    );
    add(
      `idler (${path} path): endpoint events → last of 10 000 first bytes at the backend`,
      '≤ 1 s',
      idler?.lastFirstByteMs,
      (x) => x <= 1000,
      ' ms',
    );
  }
  return out;
}

/** The results as Markdown, for the terminal and docs/benchmarks.md. */
export function markdown(r: SuiteResult): string {
  const lines: string[] = [];
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  lines.push(
    `Run ${r.startedAt} · Node ${process.version} · ${os.cpus().length} × ${cpu} · ${r.config.reps} repetition(s), median (min–max) · proxy host running ${process.env.BENCH_BUILT ? "core's build (dist/)" : "core's TypeScript sources through tsx"}`,
  );
  lines.push('');
  lines.push(
    '| scenario | direct | naive relay | userspace-proxy | naive / direct | proxy / direct | notes |',
  );
  lines.push('|---|---|---|---|---|---|---|');
  for (const row of r.rows) {
    const u = ` ${row.unit}`;
    lines.push(
      `| ${row.scenario} | ${cell(row.values.direct, u)} | ${cell(row.values.naive, u)} | ${cell(row.values.proxy, u)} | ${ratio(row.ratios.naive, row.higherIsBetter)} | ${ratio(row.ratios.proxy, row.higherIsBetter)} | ${extraText(row)} |`,
    );
  }
  const withCpu = r.rows.filter((row) => Object.keys(row.cpu ?? {}).length > 0);
  if (withCpu.length) {
    lines.push(
      '',
      'CPU use of each process while the scenario ran, % of one core (load generator / backend / proxy host; 200 % = both cores):',
      '',
      '| scenario | direct | naive relay | userspace-proxy |',
      '|---|---|---|---|',
    );
    const use = (c: CpuUse | undefined) =>
      c ? `${c.load.toFixed(0)} / ${c.backend.toFixed(0)} / ${c.proxy.toFixed(0)}` : '–';
    for (const row of withCpu) {
      lines.push(
        `| ${row.scenario} | ${use(row.cpu.direct)} | ${use(row.cpu.naive)} | ${use(row.cpu.proxy)} |`,
      );
    }
  }
  if (r.sync.length) {
    lines.push(
      '',
      '| Services × endpoints | program all | one endpoint change | one Service change | RSS | heap |',
      '|---|---|---|---|---|---|',
    );
    for (const s of r.sync) {
      lines.push(
        `| ${s.services.toLocaleString('en-US')} × ${(s.endpoints / s.services).toFixed(0)} | ${fmt(s.programMs)} ms | ${fmt(s.endpointChangeUs)} µs | ${fmt(s.serviceChangeMs)} ms | ${fmt(s.rssBytes / 2 ** 20)} MiB | ${fmt(s.heapUsedBytes / 2 ** 20)} MiB |`,
      );
    }
  }
  if (r.nextEndpoint) {
    lines.push(
      '',
      `nextEndpoint: ${Object.entries(r.nextEndpoint)
        .map(([k, v]) => `${k} ${fmt(v)}`)
        .join(', ')}`,
    );
  }
  const idlers = [r.idler, r.idlerNative].filter((x) => x !== undefined);
  if (idlers.length > 0)
    lines.push(
      '',
      'Idler (held clients, then one endpoint event per Service port):',
      '',
      ...idlerMarkdown(idlers),
    );
  const targets = checkTargets(r);
  lines.push('', '| target | goal | this run | met |', '|---|---|---|---|');
  for (const t of targets)
    lines.push(
      `| ${t.what} | ${t.goal} | ${t.measured} | ${t.met === undefined ? '–' : t.met ? 'yes' : 'no'} |`,
    );
  return lines.join('\n');
}

/** A bar chart of proxy/direct and naive/direct for every row where higher is better. */
export function svgChart(r: SuiteResult): string {
  const rows = r.rows.filter((x) => x.higherIsBetter && x.ratios.proxy);
  const barH = 12;
  const rowH = 34;
  const left = 330;
  const width = 760;
  const scale = (width - left - 60) / 1.2;
  const height = 40 + rows.length * rowH;
  const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<text x="10" y="18" font-weight="bold">Ratio to a direct connection (higher is better; 1.0 = direct)</text>`,
    `<rect x="${left}" y="26" width="10" height="10" fill="#3b7dd8"/><text x="${left + 14}" y="35">userspace-proxy</text>`,
    `<rect x="${left + 130}" y="26" width="10" height="10" fill="#bbbbbb"/><text x="${left + 144}" y="35">naive relay</text>`,
  ];
  rows.forEach((row, i) => {
    const y = 44 + i * rowH;
    const p = Math.min(row.ratios.proxy?.median ?? 0, 1.2);
    const n = Math.min(row.ratios.naive?.median ?? 0, 1.2);
    parts.push(`<text x="10" y="${y + barH}">${esc(row.scenario)}</text>`);
    parts.push(
      `<rect x="${left}" y="${y}" width="${p * scale}" height="${barH}" fill="#3b7dd8"/><text x="${left + p * scale + 4}" y="${y + 10}">${p.toFixed(2)}</text>`,
    );
    parts.push(
      `<rect x="${left}" y="${y + barH + 2}" width="${n * scale}" height="${barH}" fill="#bbbbbb"/><text x="${left + n * scale + 4}" y="${y + barH + 12}">${n.toFixed(2)}</text>`,
    );
  });
  parts.push(
    `<line x1="${left + scale}" y1="40" x2="${left + scale}" y2="${height}" stroke="#444" stroke-dasharray="3,3"/>`,
    '</svg>',
  );
  return parts.join('\n');
}
