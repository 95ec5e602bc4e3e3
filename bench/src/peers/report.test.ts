import { describe, expect, it } from 'vitest';
import { svgChart } from './chart.js';
import { PEERS_HEADING, peersBlock } from './cli.js';
import { PEERS_END, PEERS_START, replaceSection, SectionMarkersError } from './docs-section.js';
import { MEASURES } from './model.js';
import { cellText, human, markdown } from './report.js';
import { sampleResult } from './sample-result.js';

const def = (id: string) => MEASURES.find((m) => m.id === id) as (typeof MEASURES)[number];

describe('markdown', () => {
  const md = markdown(sampleResult());

  it('has a column per subject that ran and a row per measure that has figures', () => {
    expect(md).toContain('| measure | direct | HAProxy | userspace-proxy |');
    expect(md).not.toContain('nginx stream |');
    expect(md).toContain(
      '| TCP bulk, 1 stream (ratio to direct) | 20.0 Gbit/s (10.0–30.0) | 0.50 (0.40–0.60) | 0.70 |',
    );
    expect(md).toContain(
      '| 64 B half round trip, TCP (× direct) | 26.0 µs (25.0–27.0) | 1.48× (1.40–1.50) | 2.00× (2.00–2.08) |',
    );
    expect(md).toContain(
      '| proxy CPU-s per GB, 1 stream (s/GB) | – | 0.65 s/GB (0.60–0.70) | 0.45 s/GB (0.40–0.50) |',
    );
    expect(md).toContain(
      '| UDP 64 B unlimited, delivered (ratio to direct) | 290k pps (280k–300k) | – | 0.32 (0.27–0.34) |',
    );
    expect(md).not.toContain('8 streams');
  });

  it('says when, how loaded, and what was skipped', () => {
    expect(md).toMatch(/^Run 2026-12-01 09:00–09:14 UTC: 3 repetition\(s\)/);
    expect(md).toContain('Load average 1.2 at the start, 1.9 at the end.');
    expect(md).toContain('- nginx skipped: nginx or libnginx-mod-stream is not installed.');
    expect(md).toContain('Versions: node v20.20.2, haproxy 2.6.12.');
    expect(md).toContain('| RSS per idle proxied connection (KB) | – | 3.30 | 5.40 |');
  });

  it('formats figures compactly and leaves a cell empty without a figure', () => {
    expect([
      human(0.4567),
      human(35.24),
      human(350.4),
      human(9850),
      human(17_591),
      human(1_234_567),
    ]).toEqual(['0.46', '35.2', '350', '9.85k', '17.6k', '1.23 M']);
    expect(cellText(def('tcp1'), 'daemon', undefined)).toBe('–');
    expect(cellText(def('cpu1'), 'direct', { value: { median: 1, min: 1, max: 1 }, n: 1 })).toBe(
      '–',
    );
  });
});

describe('chart', () => {
  it('is a standalone SVG with a bar per peer and measure, and the latency panel apart', () => {
    const svg = svgChart(sampleResult());
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg.endsWith('</svg>')).toBe(true);
    // tcp1 ×2 peers, udp64 ×1 (HAProxy has none), rttTcp ×2, plus the background and 2 legend boxes.
    expect(svg.match(/<rect /g)?.length).toBe(1 + 5 + 2);
    expect(svg).toContain('Ratio to direct, higher is better');
    expect(svg).toContain('Half round trip, × direct, lower is better');
    expect(svg).toContain('<title>HAProxy, TCP bulk, 1 stream: 0.50 (0.40–0.60)</title>');
    expect(svg).not.toMatch(/NaN|undefined/);
  });
});

describe('the peers section of docs/benchmarks.md', () => {
  const block = peersBlock(sampleResult(), 'Measured on a shared machine.');

  it('is appended under a heading when the markers are not there yet', () => {
    const out = replaceSection('# Benchmarks\n\nIntro.\n', block, PEERS_HEADING);
    expect(out).toBe(
      `# Benchmarks\n\nIntro.\n\n${PEERS_HEADING}\n\n${PEERS_START}\n${block}\n${PEERS_END}\n`,
    );
    expect(block).toMatch(/^Measured on a shared machine\.\n\nRun /);
    expect(block).toMatch(/!\[[^\]]*\]\(benchmarks-peers\.svg\)$/);
  });

  it('replaces only what is between the markers, so a second run replaces the first', () => {
    const doc = `# B\n\n<!-- suite:start -->\nsuite\n<!-- suite:end -->\n\n${PEERS_START}\nold figures\n${PEERS_END}\n\nProse after.\n`;
    const once = replaceSection(doc, 'new figures', PEERS_HEADING);
    expect(once).toBe(doc.replace('old figures', 'new figures'));
    expect(replaceSection(once, 'newer', PEERS_HEADING)).toBe(doc.replace('old figures', 'newer'));
  });

  it('refuses broken markers instead of losing text', () => {
    expect(() => replaceSection(`a\n${PEERS_START}\nb\n`, 'x', PEERS_HEADING)).toThrow(
      SectionMarkersError,
    );
    expect(() => replaceSection(`${PEERS_END}\n${PEERS_START}\n`, 'x', PEERS_HEADING)).toThrow(
      /before/,
    );
    expect(() =>
      replaceSection(`${PEERS_START}${PEERS_END}${PEERS_START}`, 'x', PEERS_HEADING),
    ).toThrow(/twice/);
  });
});
