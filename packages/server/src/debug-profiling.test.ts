import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { PROFILE_MAX_SECONDS, ProcessProfiler } from './debug-profiling.js';
import { ProxyMetrics } from './metrics.js';
import { createMetricsServer } from './metrics-server.js';
import { until } from './test-support/wait.js';

// One profiler for the file: V8 has one sampling heap profiler per isolate.
const profiler = new ProcessProfiler();
let server: Server | undefined;

afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  server = undefined;
});
afterAll(() => profiler.close());

/** A metrics server with deadlines far shorter than a profile's window. */
async function start(withProfiler = true): Promise<string> {
  server = createMetricsServer({
    registry: new ProxyMetrics({ defaultMetrics: false }).registry,
    proxyMode: 'service-port-portal',
    configz: () => '{}',
    limits: {
      headersTimeoutMs: 300,
      requestTimeoutMs: 300,
      idleTimeoutMs: 300,
      timeoutCheckMs: 100,
    },
    ...(withProfiler ? { profiler } : {}),
  });
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

interface CpuProfile {
  nodes: { callFrame: { functionName: string } }[];
  startTime: number;
  endTime: number;
  samples: number[];
}

describe('/debug/pprof (enableProfiling)', () => {
  it('is not served without a profiler', async () => {
    const base = await start(false);
    expect((await fetch(`${base}/debug/pprof/`)).status).toBe(404);
    expect((await fetch(`${base}/debug/pprof/profile?seconds=1`)).status).toBe(404);
  });

  it('lists what it serves', async () => {
    const base = await start();
    const res = await fetch(`${base}/debug/pprof/`);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain('profile?seconds=N');
    expect(text).toContain('heap');
    expect((await fetch(`${base}/debug/pprof/symbol`)).status).toBe(404);
  });

  it('returns a CPU profile of the window asked for, outliving the idle deadline', async () => {
    const base = await start();
    const res = await fetch(`${base}/debug/pprof/profile?seconds=2`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-disposition')).toMatch(
      /^attachment; filename=".*\.cpuprofile"$/,
    );
    const profile = (await res.json()) as CpuProfile;
    expect(profile.nodes.length).toBeGreaterThan(0);
    expect(profile.nodes[0]?.callFrame.functionName).toBe('(root)');
    // V8's times are µs: the window is the one asked for, not the server's 300 ms deadlines.
    expect(profile.endTime - profile.startTime).toBeGreaterThanOrEqual(1_900_000);
  });

  it('runs one CPU profile at a time', async () => {
    const base = await start();
    const first = fetch(`${base}/debug/pprof/profile?seconds=1`);
    await until(() => profiler.cpuBusy, 'the profile to start');
    const second = await fetch(`${base}/debug/pprof/profile?seconds=1`);
    expect(second.status).toBe(409);
    expect(await second.text()).toContain('already running');
    expect((await first).status).toBe(200);
  });

  it('stops profiling when the client goes away', async () => {
    const base = await start();
    const abort = new AbortController();
    const gone = fetch(`${base}/debug/pprof/profile?seconds=${PROFILE_MAX_SECONDS}`, {
      signal: abort.signal,
    }).catch(() => undefined);
    await until(() => profiler.cpuBusy, 'the profile to start');
    abort.abort();
    await gone;
    await until(() => !profiler.cpuBusy, 'the profile to stop');
    expect((await fetch(`${base}/debug/pprof/profile?seconds=1`)).status).toBe(200);
  });

  it('refuses a bad window and other methods', async () => {
    const base = await start();
    for (const seconds of ['0', String(PROFILE_MAX_SECONDS + 1), 'abc', '1.5', '-1']) {
      const res = await fetch(`${base}/debug/pprof/profile?seconds=${seconds}`);
      expect(res.status, seconds).toBe(400);
      expect(await res.text()).toContain(`from 1 to ${PROFILE_MAX_SECONDS}`);
    }
    const post = await fetch(`${base}/debug/pprof/profile`, { method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
  });

  it('returns the live heap by allocation site', async () => {
    const base = await start();
    const res = await fetch(`${base}/debug/pprof/heap`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-disposition')).toMatch(/\.heapprofile"$/);
    const profile = (await res.json()) as { head: { callFrame: unknown; children: unknown[] } };
    expect(profile.head.callFrame).toBeDefined();
    expect(Array.isArray(profile.head.children)).toBe(true);
  });
});
