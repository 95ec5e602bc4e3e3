import type { IncomingMessage, ServerResponse } from 'node:http';
import { Session } from 'node:inspector/promises';

/**
 * kube-proxy's `enableProfiling` for a Node daemon: `/debug/pprof/…` on the metrics server, off by
 * default. Go's pprof formats mean nothing to Node, so the paths answer with V8's own profiles, the
 * ones Chrome DevTools, VS Code and speedscope open: a CPU profile over a window
 * (`/debug/pprof/profile?seconds=N`, a `.cpuprofile`) and the live heap by allocation site
 * (`/debug/pprof/heap`, a `.heapprofile` from V8's sampling heap profiler, which runs from the
 * daemon's start while profiling is on, as Go's heap profile does). Both are samples of stack
 * frames and sizes: no object's contents leave the process, which is why there is no heap snapshot
 * (it would carry the kubeconfig's credentials) and why a profile never pauses the data path.
 */

/** Go's default window for `/debug/pprof/profile`. */
export const PROFILE_DEFAULT_SECONDS = 30;
/** The longest window one request may ask for. */
export const PROFILE_MAX_SECONDS = 300;
/** V8's CPU sampling interval, µs (Node's `--cpu-prof-interval` default). */
export const PROFILE_SAMPLING_INTERVAL_US = 1000;
/**
 * Mean bytes between two samples of the heap profiler: Go's MemProfileRate (512 KiB), coarse
 * enough to cost nothing measurable on a busy data path, fine enough to find what holds memory.
 */
export const HEAP_SAMPLING_INTERVAL_BYTES = 512 * 1024;

/** The profiler's side of the inspector protocol that these paths use (V8's own, via node:inspector). */
export interface ProfilerSession {
  post(method: string, params?: object): Promise<unknown>;
  connect(): void;
  disconnect(): void;
}

const TEXT = { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' };

const INDEX = `/debug/pprof/

profile?seconds=N  V8 CPU profile of the next N seconds (default ${PROFILE_DEFAULT_SECONDS}, at most ${PROFILE_MAX_SECONDS}): a .cpuprofile
heap               live heap sampled by allocation site since the daemon started: a .heapprofile

Open either in Chrome DevTools, VS Code or speedscope. One CPU profile runs at a time.
`;

/**
 * The profiles of one process: one inspector session, one CPU profile at a time (V8 has one CPU
 * profiler per isolate: a second request would stop the first one's profile), the heap sampler
 * started by {@link ProcessProfiler.start}.
 */
export class ProcessProfiler {
  readonly #makeSession: () => ProfilerSession;
  #session: ProfilerSession | undefined;
  #cpuBusy = false;
  #heapStarted: Promise<unknown> | undefined;

  /** `makeSession` is for tests; the default is an inspector session into this process. */
  constructor(makeSession: () => ProfilerSession = () => new Session()) {
    this.#makeSession = makeSession;
  }

  #connected(): ProfilerSession {
    if (this.#session === undefined) {
      const session = this.#makeSession();
      session.connect();
      this.#session = session;
    }
    return this.#session;
  }

  /** Starts the heap sampler, so `/debug/pprof/heap` covers everything allocated from now on. */
  start(): Promise<void> {
    const session = this.#connected();
    this.#heapStarted ??= session.post('HeapProfiler.enable').then(() =>
      session.post('HeapProfiler.startSampling', {
        samplingInterval: HEAP_SAMPLING_INTERVAL_BYTES,
      }),
    );
    return this.#heapStarted.then(() => undefined);
  }

  /** True while a CPU profile runs. */
  get cpuBusy(): boolean {
    return this.#cpuBusy;
  }

  /**
   * A CPU profile of the next `seconds`, or of less when `signal` aborts first (the client went
   * away: the profiler stops at once rather than sampling for nobody). Throws ProfilerBusyError
   * while another one runs.
   */
  async cpuProfile(seconds: number, signal?: AbortSignal): Promise<unknown> {
    if (this.#cpuBusy) throw new ProfilerBusyError();
    this.#cpuBusy = true;
    const session = this.#connected();
    try {
      await session.post('Profiler.enable');
      await session.post('Profiler.setSamplingInterval', {
        interval: PROFILE_SAMPLING_INTERVAL_US,
      });
      await session.post('Profiler.start');
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', done);
          resolve();
        };
        const timer = setTimeout(done, seconds * 1000);
        if (signal?.aborted) done();
        else signal?.addEventListener('abort', done, { once: true });
      });
      const result = (await session.post('Profiler.stop')) as { profile: unknown };
      return result.profile;
    } finally {
      this.#cpuBusy = false;
    }
  }

  /** The live heap sampled since {@link start} (started now if it was not). */
  async heapProfile(): Promise<unknown> {
    await this.start();
    const result = (await this.#connected().post('HeapProfiler.getSamplingProfile')) as {
      profile: unknown;
    };
    return result.profile;
  }

  /** Stops the samplers and leaves the inspector. */
  close(): void {
    const session = this.#session;
    this.#session = undefined;
    this.#heapStarted = undefined;
    session?.disconnect();
  }
}

/** A CPU profile was asked for while one runs. */
export class ProfilerBusyError extends Error {
  readonly code = 'ERR_PROFILER_BUSY';
  constructor() {
    super('a CPU profile is already running; try again when it ends');
    this.name = 'ProfilerBusyError';
  }
}

/** `seconds` of a request: a whole number from 1 to {@link PROFILE_MAX_SECONDS}, or the default. */
export function profileSeconds(url: URL): number | string {
  const raw = url.searchParams.get('seconds');
  if (raw === null || raw === '') return PROFILE_DEFAULT_SECONDS;
  const n = /^[0-9]{1,4}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isInteger(n) || n < 1 || n > PROFILE_MAX_SECONDS) {
    return `seconds must be a whole number from 1 to ${PROFILE_MAX_SECONDS}`;
  }
  return n;
}

function attachment(res: ServerResponse, kind: string, body: unknown, whose: string): void {
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  res.writeHead(200, {
    'Content-Type': 'application/json',
    'X-Content-Type-Options': 'nosniff',
    'Cache-Control': 'no-store',
    'Content-Disposition': `attachment; filename="userspace-proxy-${whose}-${stamp}.${kind}"`,
  });
  res.end(JSON.stringify(body));
}

function failed(res: ServerResponse, status: number, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, TEXT);
  res.end(`${message}\n`);
}

/** How long past a profile's window the primary waits for the worker's answer. */
export const WORKER_PROFILE_GRACE_MS = 30_000;

/**
 * How long the primary waits for a worker's heap profile (it takes milliseconds): under the
 * metrics server's 10 s idle deadline, so a hung worker's client gets the 502, not a closed
 * connection.
 */
export const WORKER_HEAP_PROFILE_WAIT_MS = 5_000;

/**
 * The workers of a `--workers` primary, for `?worker=K`: their data path runs in their own
 * processes, so the primary's profiles do not show it. `profile` rejects with an error whose
 * `code` is ERR_PROFILER_BUSY when that worker's CPU profiler runs already.
 */
export interface WorkerProfiles {
  /** How many workers there are (`?worker=` takes 1 to this). */
  readonly count: number;
  /** `index` is 0-based; `signal` stops a CPU profile early. */
  profile(
    index: number,
    kind: 'cpu' | 'heap',
    seconds: number,
    signal?: AbortSignal,
  ): Promise<unknown>;
}

/** What {@link serveProfiling} serves from. */
export interface ProfilingSources {
  /** This process's profiles. */
  readonly profiler: ProcessProfiler;
  /** A primary's workers, for `?worker=K`; without it `?worker=` is refused. */
  readonly workers?: WorkerProfiles;
}

/** `?worker=K` of a request: undefined for this process, a 0-based index, or why it is refused. */
function workerIndex(url: URL, workers: WorkerProfiles | undefined): number | undefined | string {
  const raw = url.searchParams.get('worker');
  if (raw === null) return undefined;
  if (workers === undefined || workers.count === 0) return 'this daemon runs no workers';
  const n = /^[0-9]{1,4}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isInteger(n) || n < 1 || n > workers.count) {
    return `worker must be a whole number from 1 to ${workers.count}`;
  }
  return n - 1;
}

function isBusy(err: unknown): boolean {
  return (err as { code?: unknown } | undefined)?.code === 'ERR_PROFILER_BUSY';
}

/**
 * Serves `/debug/pprof/…` from `sources`; returns false for any other path (the caller answers
 * it). GET and HEAD only. `?worker=K` (1-based, as the logs count workers) profiles a worker.
 */
export function serveProfiling(
  sources: ProfilingSources,
  url: URL,
  req: IncomingMessage,
  res: ServerResponse,
): boolean {
  const path = url.pathname;
  if (path !== '/debug/pprof' && !path.startsWith('/debug/pprof/')) return false;
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { ...TEXT, Allow: 'GET, HEAD' });
    res.end('method not allowed\n');
    return true;
  }
  if (path === '/debug/pprof' || path === '/debug/pprof/') {
    res.writeHead(200, TEXT);
    res.end(sources.workers?.count ? `${INDEX}${workersLine(sources.workers.count)}` : INDEX);
    return true;
  }
  if (path !== '/debug/pprof/profile' && path !== '/debug/pprof/heap') return false;
  const worker = workerIndex(url, sources.workers);
  if (typeof worker === 'string') {
    failed(res, 400, worker);
    return true;
  }
  const { profiler, workers } = sources;
  const whose = worker === undefined ? String(process.pid) : `worker${worker + 1}`;
  if (path === '/debug/pprof/heap') {
    // A worker's answer may take up to WORKER_HEAP_PROFILE_WAIT_MS: past it the client gets a 502,
    // which the server's idle deadline must not pre-empt with a closed connection.
    if (worker !== undefined) req.socket.setTimeout(WORKER_HEAP_PROFILE_WAIT_MS + 5_000);
    const heap =
      worker === undefined || workers === undefined
        ? profiler.heapProfile()
        : workers.profile(worker, 'heap', 0);
    heap.then(
      (profile) => attachment(res, 'heapprofile', profile, whose),
      (err: unknown) => failed(res, 502, `heap profile failed: ${(err as Error).message}`),
    );
    return true;
  }
  const seconds = profileSeconds(url);
  if (typeof seconds === 'string') {
    failed(res, 400, seconds);
    return true;
  }
  if (worker === undefined && profiler.cpuBusy) {
    failed(res, 409, new ProfilerBusyError().message);
    return true;
  }
  // The connection is silent while the profile runs: the server's idle deadline must not end it.
  // A worker's answer may come up to WORKER_PROFILE_GRACE_MS after the window: past it, a 502.
  req.socket.setTimeout(seconds * 1000 + WORKER_PROFILE_GRACE_MS + 5_000);
  const gone = new AbortController();
  res.on('close', () => gone.abort());
  const cpu =
    worker === undefined || workers === undefined
      ? profiler.cpuProfile(seconds, gone.signal)
      : workers.profile(worker, 'cpu', seconds, gone.signal);
  cpu.then(
    (profile) => (gone.signal.aborted ? undefined : attachment(res, 'cpuprofile', profile, whose)),
    (err: unknown) =>
      isBusy(err)
        ? failed(res, 409, (err as Error).message)
        : failed(res, 502, `profile failed: ${(err as Error).message}`),
  );
  return true;
}

function workersLine(count: number): string {
  return `\nAdd worker=K (1 to ${count}) to either for a worker's profile: the data path runs there.\n`;
}

let shared: ProcessProfiler | undefined;

/**
 * The process's one profiler, its heap sampler started on first use: V8 has one sampling heap
 * profiler per isolate, so two daemons in one process (tests, an embedder's restart) share it, and
 * it runs until the process exits. A failure to start is logged, and the paths still answer.
 */
export function sharedProcessProfiler(logger?: {
  warn(...args: unknown[]): unknown;
}): ProcessProfiler {
  if (shared === undefined) {
    shared = new ProcessProfiler();
    shared.start().catch((err: unknown) => {
      logger?.warn(`heap profiler did not start: ${(err as Error).message}`);
    });
  }
  return shared;
}
