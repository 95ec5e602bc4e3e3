import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { findExcessiveNesting } from './manifest-depth.js';
import { REPO_ROOT } from './test-support/daemon-process.js';
import { serviceWithSlice } from './test-support/manifests.js';

/** The real nesting of a parsed value (maps and lists). */
function depthOf(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  return 1 + Math.max(0, ...children.map(depthOf));
}

/** The smallest limit the scan accepts `text` under. */
function scannedDepth(text: string): number {
  let max = 0;
  while (findExcessiveNesting(text, max) !== undefined) max++;
  return max;
}

const svc = serviceWithSlice({
  clusterIP: '127.1.71.1',
  port: 80,
  endpoints: [{ ip: '127.1.71.2', port: 8080 }],
});

describe('findExcessiveNesting', () => {
  it.each([
    ['a Service and its EndpointSlice', svc],
    ['a List in JSON', JSON.stringify({ kind: 'List', items: [{ a: { b: [{ c: 1 }] } }] })],
    ['a block scalar', 'a:\n  b: |\n        deeply\n            indented [ { text\n  c: 1\n'],
    ['quotes and comments', "a: \"[[[{{{\" # [[[[\nb: 'it''s ['\nc: x[1] {y}\n# [[[[[[\n"],
    ['compact sequences', 'a:\n- - - x\n  - y\n'],
    ['documents', `${svc}---\n${svc}...\n`],
  ])('does not count more than the real depth of %s', (_name, text) => {
    const real = Math.max(0, ...parseAllDocuments(text).map((d) => depthOf(d.toJS())));
    expect(scannedDepth(text)).toBeLessThanOrEqual(real + 1);
  });

  it('accepts the example manifest at a small depth', async () => {
    const text = await readFile(`${REPO_ROOT}examples/standalone/services.yaml`, 'utf8');
    expect(scannedDepth(text)).toBeLessThan(10);
  });

  it.each([
    ['flow lists', `a: ${'['.repeat(100)}${']'.repeat(100)}\n`, 1],
    ['flow maps over lines', `a:\n${'  {b:\n'.repeat(100)}  1${'}'.repeat(100)}\n`, 64],
    ['block maps', Array.from({ length: 100 }, (_, i) => `${' '.repeat(i)}k:\n`).join(''), 65],
    ['compact sequences', `${'- '.repeat(100)}x\n`, 1],
  ])('finds %s nested past the limit, and where', (_name, text, line) => {
    expect(findExcessiveNesting(text, 64)).toMatchObject({ line, depth: 65 });
  });

  it('scans a multi-MiB text in linear time', () => {
    // One 4 MiB line: a scan that goes back over the line (or the text) for each character is
    // quadratic, hours here. The linear scan takes ~0.1-0.3 s idle and up to 1.5 s was seen on a
    // loaded 2-core machine, so a bound of 1 s failed there; 10 s still tells linear from quadratic.
    const text = `a: ${'[1, "x", {b: c}], '.repeat(200_000)}\n`;
    const start = performance.now();
    expect(findExcessiveNesting(text, 64)).toBeUndefined();
    expect(performance.now() - start).toBeLessThan(10_000);
  }, 30_000);
});
