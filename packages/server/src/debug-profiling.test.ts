import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { PROFILE_MAX_SECONDS, ProcessProfiler, type WorkerProfiles } from './debug-profiling.js';
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
async function start(withProfiler = true, workers?: WorkerProfiles): Promise<string> {
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
    ...(withProfiler ? { profiling: { profiler, ...(workers ? { workers } : {}) } } : {}),
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

  describe('?worker=K (a --workers primary)', () => {
    /** Workers that record what they were asked and answer as `reply` says. */
    function fakeWorkers(reply: (index: number, kind: string) => Promise<unknown>) {
      const asked: { index: number; kind: string; seconds: number; signal?: AbortSignal }[] = [];
      const workers: WorkerProfiles = {
        count: 2,
        profile(index, kind, seconds, signal) {
          asked.push({ index, kind, seconds, ...(signal ? { signal } : {}) });
          return reply(index, kind);
        },
      };
      return { workers, asked };
    }

    it('asks that worker, 1-based, and names the file after it', async () => {
      const { workers, asked } = fakeWorkers(async (i, kind) => ({ from: i, kind }));
      const base = await start(true, workers);
      expect(await (await fetch(`${base}/debug/pprof/`)).text()).toContain('worker=K (1 to 2)');
      const cpu = await fetch(`${base}/debug/pprof/profile?seconds=7&worker=2`);
      expect(cpu.status).toBe(200);
      expect(cpu.headers.get('content-disposition')).toMatch(
        /userspace-proxy-worker2-.*\.cpuprofile"$/,
      );
      expect(await cpu.json()).toEqual({ from: 1, kind: 'cpu' });
      const heap = await fetch(`${base}/debug/pprof/heap?worker=1`);
      expect(await heap.json()).toEqual({ from: 0, kind: 'heap' });
      expect(asked.map(({ index, kind, seconds }) => [index, kind, seconds])).toEqual([
        [1, 'cpu', 7],
        [0, 'heap', 0],
      ]);
    });

    it('refuses a worker that does not exist, and any worker without workers', async () => {
      const { workers, asked } = fakeWorkers(async () => ({}));
      let base = await start(true, workers);
      for (const w of ['0', '3', 'x', '']) {
        const res = await fetch(`${base}/debug/pprof/heap?worker=${w}`);
        expect(res.status, w).toBe(400);
        expect(await res.text()).toContain('from 1 to 2');
      }
      expect(asked).toEqual([]);
      server?.closeAllConnections();
      await new Promise((resolve) => server?.close(resolve));
      base = await start(true);
      const none = await fetch(`${base}/debug/pprof/profile?worker=1`);
      expect(none.status).toBe(400);
      expect(await none.text()).toContain('runs no workers');
    });

    it('says 409 for a busy worker, 502 for one that fails, and passes a client leaving on', async () => {
      let mode: 'busy' | 'fail' | 'hang' = 'busy';
      const { workers, asked } = fakeWorkers(
        () =>
          new Promise((resolve, reject) => {
            if (mode === 'busy')
              reject(Object.assign(new Error('already running'), { code: 'ERR_PROFILER_BUSY' }));
            else if (mode === 'fail') reject(new Error('worker 2 did not answer'));
            else asked.at(-1)?.signal?.addEventListener('abort', () => resolve({}));
          }),
      );
      const base = await start(true, workers);
      expect((await fetch(`${base}/debug/pprof/profile?seconds=1&worker=2`)).status).toBe(409);
      mode = 'fail';
      const failed = await fetch(`${base}/debug/pprof/profile?seconds=1&worker=2`);
      expect(failed.status).toBe(502);
      expect(await failed.text()).toContain('did not answer');
      mode = 'hang';
      const abort = new AbortController();
      const gone = fetch(`${base}/debug/pprof/profile?seconds=60&worker=1`, {
        signal: abort.signal,
      }).catch(() => undefined);
      await until(() => asked.length === 3, 'the worker to be asked');
      abort.abort();
      await gone;
      await until(() => asked[2]?.signal?.aborted === true, 'the stop to reach the worker');
    });
  });
});
