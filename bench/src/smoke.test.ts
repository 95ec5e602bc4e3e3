import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { checkTargets, markdown, svgChart } from './report.js';
import { runSuite, SMOKE } from './suite.js';

describe('benchmark harness (smoke)', () => {
  it('runs every scenario through direct, naive and the real Proxier and reports ratios', async () => {
    const result = await runSuite(SMOKE);
    const scenarios = result.rows.map((r) => r.scenario);
    expect(scenarios).toContain('TCP bulk, 1 stream(s)');
    expect(scenarios).toContain('64 B half round trip, UDP');
    for (const row of result.rows.filter((r) => r.group !== 'memory')) {
      expect(row.values.direct?.median, row.scenario).toBeGreaterThan(0);
      expect(row.values.proxy?.median, row.scenario).toBeGreaterThan(0);
      expect(row.ratios.proxy?.median, row.scenario).toBeGreaterThan(0);
    }
    expect(result.sync[0]?.programMs).toBeGreaterThan(0);
    expect(markdown(result)).toContain('| target | goal | this run | met |');
    expect(svgChart(result)).toContain('<svg');
    expect(checkTargets(result).length).toBeGreaterThan(4);
    // The idler group: every held client reached the backend after the endpoint events.
    expect(result.idler?.firstBytes).toBe(result.idler?.held);
    // Its backend is the C one wherever `cc` runs (bench/native/idler-backend.c), else Node's.
    const cc = spawnSync('cc', ['--version']).status === 0;
    expect(result.idler?.backend).toBe(cc ? 'native' : 'node');
    // And on the native helper wherever it can be compiled (CI installs a compiler).
    if (cc) {
      expect(result.idlerNative?.firstBytes).toBe(result.idlerNative?.held);
      expect(result.idlerNative?.dataPath).toBe('native');
    }
    expect(markdown(result)).toContain('| held clients / Service ports |');
  }, 120_000);
});
