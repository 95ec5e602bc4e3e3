import type { Stat } from '../stats.js';
import {
  MEASURES,
  type MeasureDef,
  type PeersResult,
  SUBJECT_LABELS,
  type SubjectId,
} from './model.js';
import { type Cell, type Summary, summarize } from './pairing.js';

/** A figure in few characters: 35.2, 0.49, 15.3k, 1.27 M. */
export function human(x: number): string {
  const a = Math.abs(x);
  if (a >= 1e6) return `${(x / 1e6).toFixed(2)} M`;
  if (a >= 1e5) return `${(x / 1e3).toFixed(0)}k`;
  if (a >= 1e4) return `${(x / 1e3).toFixed(1)}k`;
  if (a >= 1e3) return `${(x / 1e3).toFixed(2)}k`;
  if (a >= 100) return x.toFixed(0);
  if (a >= 10) return x.toFixed(1);
  return x.toFixed(2);
}

/** `median (min–max)`, the range left out when there is only one value or no spread. */
function withRange(s: Stat, f: (x: number) => string, suffix = ''): string {
  const med = `${f(s.median)}${suffix}`;
  if (s.min === s.max) return med;
  return `${med} (${f(s.min)}–${f(s.max)})`;
}

const two = (x: number) => x.toFixed(2);

/** One table cell for `subject` in the row of `def`. */
export function cellText(def: MeasureDef, subject: SubjectId, cell: Cell | undefined): string {
  if (!cell?.value) return '–';
  if (subject === 'direct' || def.kind === 'absolute') {
    if (subject === 'direct' && !def.direct) return '–';
    return withRange(cell.value, human, ` ${def.unit}`);
  }
  if (!cell.ratio) return '–';
  return def.kind === 'latency' ? withRange(cell.ratio, two, '×') : withRange(cell.ratio, two);
}

function rowLabel(def: MeasureDef): string {
  if (def.kind === 'ratio') return `${def.label} (ratio to direct)`;
  if (def.kind === 'latency') return `${def.label} (× direct)`;
  return `${def.label} (${def.unit})`;
}

/**
 * The run as Markdown: a header line (when, how, how loaded), the table of ratios with the direct
 * figures, a table of every subject's absolute medians, and the notes (skips, failures).
 */
export function markdown(result: PeersResult, summary: Summary = summarize(result)): string {
  const subjects = result.subjects;
  const head = `| measure | ${subjects.map((s) => SUBJECT_LABELS[s]).join(' | ')} |`;
  const rule = `|---|${subjects.map(() => '---').join('|')}|`;
  const rows: string[] = [];
  const absRows: string[] = [];
  for (const def of MEASURES) {
    const row = summary[def.id];
    if (!row || Object.keys(row).length === 0) continue;
    rows.push(
      `| ${rowLabel(def)} | ${subjects.map((s) => cellText(def, s, row[s])).join(' | ')} |`,
    );
    const abs = subjects.map((s) => {
      const v = row[s]?.value;
      return v && (s !== 'direct' || def.direct) ? human(v.median) : '–';
    });
    absRows.push(`| ${def.label} (${def.unit}) | ${abs.join(' | ')} |`);
  }
  const when = `${result.startedAt.slice(0, 16).replace('T', ' ')}–${result.finishedAt.slice(11, 16)} UTC`;
  const out = [
    `Run ${when}: ${result.reps} repetition(s)${result.quick ? ' (--quick)' : ''}, median of the per-repetition ratios to direct, (min–max) over repetitions. Load average ${result.load.start.toFixed(1)} at the start, ${result.load.end.toFixed(1)} at the end. ${result.method}`,
    '',
    head,
    rule,
    ...rows,
    '',
    'Absolute medians:',
    '',
    head,
    rule,
    ...absRows,
  ];
  const versions = Object.entries(result.versions).map(([k, v]) => `${k} ${v}`);
  if (versions.length) out.push('', `Versions: ${versions.join(', ')}.`);
  if (result.notes.length) out.push('', 'Notes:', '', ...result.notes.map((n) => `- ${n}`));
  return out.join('\n');
}
