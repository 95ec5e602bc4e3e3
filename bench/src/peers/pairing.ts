import { type Stat, stat } from '../stats.js';
import { MEASURES, type PeersResult, type Series, type SubjectId } from './model.js';

/**
 * Subject ÷ direct, repetition by repetition. Pairing is the point: absolute figures drift 10–20 %
 * over minutes on a shared machine, so a subject is only compared with the direct figure measured
 * in the same repetition, a minute or two apart. A repetition where either figure is missing (or
 * direct is not positive) gives no ratio rather than a wrong one.
 */
export function pairedRatios(direct: Series, subject: Series): number[] {
  const out: number[] = [];
  const n = Math.min(direct.length, subject.length);
  for (let i = 0; i < n; i++) {
    const d = direct[i];
    const s = subject[i];
    if (d == null || s == null || !Number.isFinite(d) || !Number.isFinite(s) || d <= 0) continue;
    out.push(s / d);
  }
  return out;
}

/** The finite values of a series. */
export function present(series: Series | undefined): number[] {
  return (series ?? []).filter((x): x is number => x != null && Number.isFinite(x));
}

/** One cell of the table: the subject's own figures and, for ratio measures, the paired ratios. */
export interface Cell {
  value?: Stat;
  ratio?: Stat;
  /** Repetitions that gave a figure. */
  n: number;
}

/** measure id → subject → cell: the medians (with min–max) the table and the chart show. */
export type Summary = Record<string, Partial<Record<SubjectId, Cell>>>;

/** Medians over repetitions of every figure and of every paired ratio. */
export function summarize(result: PeersResult): Summary {
  const out: Summary = {};
  for (const def of MEASURES) {
    const bySubject = result.samples[def.id];
    if (!bySubject) continue;
    const row: Partial<Record<SubjectId, Cell>> = {};
    for (const subject of result.subjects) {
      const values = present(bySubject[subject]);
      if (values.length === 0) continue;
      const cell: Cell = { value: stat(values), n: values.length };
      if (def.kind !== 'absolute' && subject !== 'direct') {
        const ratios = pairedRatios(bySubject.direct ?? [], bySubject[subject] ?? []);
        if (ratios.length) cell.ratio = stat(ratios);
      }
      row[subject] = cell;
    }
    out[def.id] = row;
  }
  return out;
}
