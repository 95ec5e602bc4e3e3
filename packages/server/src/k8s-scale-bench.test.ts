import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './test-support/daemon-process.js';

// The Kubernetes scale benchmark (bench/src/k8s-scale.ts) drives the real daemon against the fake API
// server; this runs it at a tiny size, so that a change to the daemon or the fake server that breaks
// the benchmark fails here rather than when someone next measures.
describe('bench/src/k8s-scale.ts', () => {
  it('runs the daemon to a full sync, through changes, and reports every figure', async () => {
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        'bench/src/k8s-scale.ts',
        ...['--services', '20', '--endpoints', '60', '--changes', '1', '--timeout', '60', '--gc'],
      ],
      { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
    });
    child.stderr.on('data', (c: Buffer) => {
      out += c.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(out).toContain('20 Services, 60 endpoints');
    expect(code, out).toBe(0);
    for (const row of [
      '**first full sync**',
      "a Service's port changed",
      'a Service added',
      'an EndpointSlice changed',
      'RSS after the first sync',
      'JS heap committed then',
      'after a full GC (`--gc`)',
      'SIGTERM to exit',
    ]) {
      expect(out).toContain(row);
    }
  }, 90_000);
});
