import {
  MEASURES,
  type MeasureDef,
  type PeersResult,
  SUBJECT_LABELS,
  type SubjectId,
} from './model.js';
import { type Summary, summarize } from './pairing.js';

/** One colour per peer, stable across runs so two charts can be compared by eye. */
const COLOURS: Readonly<Record<SubjectId, string>> = {
  direct: '#999999',
  haproxy: '#4e79a7',
  nginx: '#59a14f',
  naive: '#f28e2b',
  daemon: '#e15759',
  daemon2: '#b07aa1',
  native: '#76b7b2',
};

const BAR = 14;
const GAP = 26;
const PANEL_H = 170;
const LEFT = 48;

const esc = (s: string): string =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

interface Panel {
  title: string;
  defs: MeasureDef[];
}

/**
 * Draws one panel: a group of bars per measure, one bar per peer (the median paired ratio), a
 * whisker for min–max, and a dashed line at 1 (= direct). Returns the SVG elements and the height.
 */
function panel(
  p: Panel,
  summary: Summary,
  peers: SubjectId[],
  top: number,
): { svg: string[]; width: number } {
  const groupW = peers.length * BAR + GAP;
  // Wide enough for the title too (about 6.5 px per character at 11 px, bold).
  const width = Math.max(LEFT + p.defs.length * groupW + 10, LEFT + p.title.length * 6.5);
  let top1 = 1;
  for (const def of p.defs)
    for (const s of peers) top1 = Math.max(top1, summary[def.id]?.[s]?.ratio?.max ?? 0);
  // At most about 8 grid lines, at a round step.
  const step = [0.25, 0.5, 1, 2, 5, 10].find((st) => top1 / st <= 8) ?? 20;
  const max = Math.ceil(top1 / step) * step;
  const y = (v: number) => top + 24 + PANEL_H - (v / max) * PANEL_H;
  const out: string[] = [
    `<text x="${LEFT}" y="${top + 14}" font-weight="bold">${esc(p.title)}</text>`,
  ];
  for (let t = 0; t <= max + 1e-9; t += step) {
    const yy = y(t).toFixed(1);
    out.push(
      `<line x1="${LEFT - 4}" y1="${yy}" x2="${width}" y2="${yy}" stroke="#ddd"/>`,
      `<text x="${LEFT - 8}" y="${(y(t) + 4).toFixed(1)}" text-anchor="end">${step < 1 ? t.toFixed(2) : t}</text>`,
    );
  }
  // Direct, whether or not 1 is on the grid.
  out.push(
    `<line x1="${LEFT - 4}" y1="${y(1).toFixed(1)}" x2="${width}" y2="${y(1).toFixed(1)}" stroke="#333" stroke-dasharray="4 3"/>`,
  );
  p.defs.forEach((def, g) => {
    const gx = LEFT + 8 + g * groupW;
    peers.forEach((s, k) => {
      const r = summary[def.id]?.[s]?.ratio;
      if (!r) return;
      const x = gx + k * BAR;
      const h = (r.median / max) * PANEL_H;
      out.push(
        `<rect x="${x}" y="${y(r.median).toFixed(1)}" width="${BAR - 2}" height="${h.toFixed(1)}" fill="${COLOURS[s]}"><title>${esc(`${SUBJECT_LABELS[s]}, ${def.label}: ${r.median.toFixed(2)} (${r.min.toFixed(2)}–${r.max.toFixed(2)})`)}</title></rect>`,
      );
      if (r.max > r.min) {
        const cx = x + (BAR - 2) / 2;
        out.push(
          `<line x1="${cx}" y1="${y(r.max).toFixed(1)}" x2="${cx}" y2="${y(r.min).toFixed(1)}" stroke="#222"/>`,
        );
      }
    });
    const label = def.label.replace(/^(TCP bulk|new connections\/s|64 B half round trip), /, '');
    out.push(
      `<text x="${gx + (peers.length * BAR) / 2}" y="${top + 24 + PANEL_H + 16}" text-anchor="middle" font-size="10">${esc(shortLabel(def, label))}</text>`,
    );
  });
  return { svg: out, width };
}

function shortLabel(def: MeasureDef, rest: string): string {
  if (def.group === 'bulk') return `TCP ${rest}`;
  if (def.group === 'conn') return `conn/s ${rest}`;
  if (def.group === 'udp') return def.id === 'udp64' ? 'UDP 64 B' : 'UDP 1400 B';
  return rest;
}

/**
 * A self-contained SVG (no fonts, scripts or dependencies) of the paired ratios: throughput-like
 * measures in one panel (higher is better), half round trips in another (lower is better), so no bar
 * needs reading upside down.
 */
export function svgChart(result: PeersResult, summary: Summary = summarize(result)): string {
  const peers = result.subjects.filter((s) => s !== 'direct');
  const has = (def: MeasureDef) => peers.some((s) => summary[def.id]?.[s]?.ratio);
  const panels: Panel[] = [
    {
      title: 'Ratio to direct, higher is better',
      defs: MEASURES.filter((d) => d.kind === 'ratio' && has(d)),
    },
    {
      title: 'Half round trip, × direct, lower is better',
      defs: MEASURES.filter((d) => d.kind === 'latency' && has(d)),
    },
  ].filter((p) => p.defs.length > 0);
  const body: string[] = [];
  let top = 8;
  let width = 320;
  let x = 0;
  for (const p of panels) {
    const drawn = panel(p, summary, peers, top);
    body.push(`<g transform="translate(${x} 0)">`, ...drawn.svg, '</g>');
    x += drawn.width + 20;
    width = Math.max(width, x);
  }
  top += 24 + PANEL_H + 30;
  peers.forEach((s, i) => {
    const lx = LEFT + i * 130;
    body.push(
      `<rect x="${lx}" y="${top}" width="12" height="12" fill="${COLOURS[s]}"/>`,
      `<text x="${lx + 16}" y="${top + 10}">${esc(SUBJECT_LABELS[s])}</text>`,
    );
  });
  const height = top + 26;
  const day = result.startedAt.slice(0, 10);
  body.push(
    `<text x="${LEFT}" y="${height - 2}" fill="#666">${esc(`${day}, median of ${result.reps} paired repetition(s); whiskers min–max; dashed line = direct`)}</text>`,
  );
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height + 6}" viewBox="0 0 ${width} ${height + 6}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    ...body,
    '</svg>',
  ].join('\n');
}
