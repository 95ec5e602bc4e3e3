import cluster, { type Worker } from 'node:cluster';
import { componentLogger, type Logger } from '@userspace-proxy/core';
import { Counter, Gauge, type Registry } from 'prom-client';
import { WORKER_HEAP_PROFILE_WAIT_MS, WORKER_PROFILE_GRACE_MS } from '../debug-profiling.js';
import { type FromWorker, isOurs, type ToWorker } from './protocol.js';

/**
 * The primary's workers: forks them through `node:cluster` with SCHED_NONE (every worker accepts on
 * the shared listening descriptor itself; docs/operations.md says why not round-robin), restarts a
 * worker that dies with a back-off, and carries requests and answers. A worker that is not yet
 * ready (still loading) gets nothing: on `up:ready` the pool's owner sends it the whole state.
 */

/** First restart delay; doubled per consecutive early death. */
export const WORKER_RESTART_BASE_MS = 500;
/** Longest restart delay. */
export const WORKER_RESTART_MAX_MS = 30_000;
/** A worker that lived this long resets the back-off. */
export const WORKER_RESTART_RESET_MS = 30_000;
/** How long a request (metrics, status) waits for each worker. */
export const WORKER_REQUEST_TIMEOUT_MS = 5000;

/**
 * How long to wait before restarting a worker that died after `earlyDeaths` deaths in a row each
 * within {@link WORKER_RESTART_RESET_MS} of its start (0 for one that had lived longer): a crash loop
 * backs off to {@link WORKER_RESTART_MAX_MS} instead of forking as fast as it fails.
 */
export function restartDelay(earlyDeaths: number): number {
  return Math.min(
    WORKER_RESTART_MAX_MS,
    WORKER_RESTART_BASE_MS * 2 ** Math.max(0, earlyDeaths - 1),
  );
}

/** One worker place: its index stays while processes come and go. */
interface Slot {
  index: number;
  worker: Worker | undefined;
  ready: boolean;
  startedAt: number;
  earlyDeaths: number;
  restartTimer: NodeJS.Timeout | undefined;
}

/** One worker's answer to a request. */
export interface WorkerAnswer {
  index: number;
  pid: number;
  body: unknown;
}

/** Options of {@link WorkerPool}. */
export interface WorkerPoolOptions {
  count: number;
  /** The script each worker runs (the bin, main.ts or main.js). */
  exec: string;
  logger: Logger;
  /** Where the worker metrics are registered (the primary's registry). */
  registry: Registry;
  /** A worker is ready: send it its state. */
  onReady(index: number, send: (message: ToWorker) => void): void;
  /** Any other message of a worker. */
  onMessage(index: number, message: FromWorker): void;
  /** A worker went away (its state is gone with it). */
  onExit?(index: number): void;
}

/** The primary's set of workers. */
export class WorkerPool {
  readonly #o: WorkerPoolOptions;
  readonly #log: Logger;
  readonly #slots: Slot[];
  /**
   * Requests waiting for a worker's `up:response`, by id, with the slot asked: a worker that exits
   * fails its own at once (a profile would otherwise wait out its whole window and grace).
   */
  readonly #pending = new Map<
    number,
    { slot: number; done: (answer: { body: unknown; error?: string; code?: string }) => void }
  >();
  #nextId = 1;
  #stopping = false;
  readonly #restarts: Counter;
  readonly #exits: { promise: Promise<void>; resolve: () => void };

  constructor(options: WorkerPoolOptions) {
    this.#o = options;
    this.#log = componentLogger(options.logger, 'workers');
    this.#slots = Array.from({ length: options.count }, (_, index) => ({
      index,
      worker: undefined,
      ready: false,
      startedAt: 0,
      earlyDeaths: 0,
      restartTimer: undefined,
    }));
    this.#restarts = new Counter({
      name: 'userspace_proxy_worker_restarts_total',
      help: 'Workers (--workers) restarted after they died, per worker index',
      labelNames: ['worker'],
      registers: [options.registry],
    });
    const slots = this.#slots;
    new Gauge({
      name: 'userspace_proxy_workers',
      help: 'Workers (--workers) running and ready',
      registers: [options.registry],
      collect() {
        this.set(slots.filter((s) => s.ready).length);
      },
    });
    let resolve = () => {};
    const promise = new Promise<void>((r) => {
      resolve = r;
    });
    this.#exits = { promise, resolve };
  }

  /** Forks every worker. */
  start(): void {
    // Before the first fork: the policy is read when the primary sets up.
    cluster.schedulingPolicy = cluster.SCHED_NONE;
    cluster.setupPrimary({ exec: this.#o.exec, args: [] });
    for (const slot of this.#slots) this.#fork(slot);
  }

  /** Indexes of the workers ready now. */
  readyIndexes(): number[] {
    return this.#slots.filter((s) => s.ready).map((s) => s.index);
  }

  /** The workers' pids by index (undefined while one restarts). */
  pids(): (number | undefined)[] {
    return this.#slots.map((s) => (s.ready ? s.worker?.process.pid : undefined));
  }

  /** Sends `message` to worker `index` if it is ready. */
  send(index: number, message: ToWorker): void {
    const slot = this.#slots[index];
    if (slot?.ready && slot.worker?.isConnected()) slot.worker.send(message);
  }

  /** Asks every ready worker; a worker that does not answer in time is left out. */
  async request(what: 'metrics' | 'status'): Promise<WorkerAnswer[]> {
    const asked = this.#slots.filter((s) => s.ready && s.worker?.isConnected());
    const answers = await Promise.all(
      asked.map(async (slot) => {
        const id = this.#nextId++;
        const pid = slot.worker?.process.pid ?? 0;
        const answer = await new Promise<{ body: unknown; error?: string } | undefined>((res) => {
          const timer = setTimeout(() => {
            this.#pending.delete(id);
            res(undefined);
          }, WORKER_REQUEST_TIMEOUT_MS);
          this.#pending.set(id, {
            slot: slot.index,
            done: (a) => {
              clearTimeout(timer);
              res(a);
            },
          });
          slot.worker?.send({ type: 'up:request', id, what } satisfies ToWorker);
        });
        if (answer === undefined || answer.error !== undefined) {
          this.#log.warn(
            `worker ${slot.index + 1} did not answer the ${what} request${answer?.error ? `: ${answer.error}` : ''}`,
          );
          return undefined;
        }
        return { index: slot.index, pid, body: answer.body };
      }),
    );
    return answers.filter((a): a is WorkerAnswer => a !== undefined);
  }

  /**
   * A profile of worker `index` (0-based): `enableProfiling`'s `?worker=` (debug-profiling.ts).
   * Rejects with WorkerProfileError when that worker is not ready, does not answer within the
   * window and 30 s, or fails (its `code` kept: a busy profiler is ERR_PROFILER_BUSY). `signal`
   * stops a CPU profile early, and the worker answers with what it sampled.
   */
  profile(
    index: number,
    kind: 'cpu' | 'heap',
    seconds: number,
    signal?: AbortSignal,
  ): Promise<unknown> {
    const slot = this.#slots[index];
    const worker = slot?.ready ? slot.worker : undefined;
    if (worker === undefined || !worker.isConnected()) {
      return Promise.reject(
        new WorkerProfileError(`worker ${index + 1} is not running`, 'ERR_NO_WORKER'),
      );
    }
    const id = this.#nextId++;
    return new Promise<unknown>((resolve, reject) => {
      const onAbort = () => {
        if (worker.isConnected()) worker.send({ type: 'up:profile-stop', id } satisfies ToWorker);
      };
      const timer = setTimeout(
        () => {
          this.#pending.delete(id);
          signal?.removeEventListener('abort', onAbort);
          reject(
            new WorkerProfileError(`worker ${index + 1} did not answer`, 'ERR_WORKER_TIMEOUT'),
          );
        },
        kind === 'cpu' ? seconds * 1000 + WORKER_PROFILE_GRACE_MS : WORKER_HEAP_PROFILE_WAIT_MS,
      );
      this.#pending.set(id, {
        slot: index,
        done: (a) => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          if (a.error === undefined) resolve(a.body);
          else reject(new WorkerProfileError(a.error, a.code ?? 'ERR_WORKER_PROFILE'));
        },
      });
      signal?.addEventListener('abort', onAbort, { once: true });
      worker.send({ type: 'up:profile', id, kind, seconds } satisfies ToWorker);
    });
  }

  /**
   * Stops every worker: `drain` sends each the drain (it stops accepting, lets its connections
   * finish for its drain timeout and exits); otherwise they stop at once. Resolves when all exited.
   */
  stop(drain: boolean): Promise<void> {
    this.#stopping = true;
    for (const slot of this.#slots) {
      clearTimeout(slot.restartTimer);
      if (slot.worker?.isConnected()) {
        const message: ToWorker = drain ? { type: 'up:drain' } : { type: 'up:stop-now' };
        slot.worker.send(message);
      }
    }
    this.#checkAllExited();
    return this.#exits.promise;
  }

  /** Kills workers still running (the last step of a stop that waited long enough). */
  kill(): void {
    for (const slot of this.#slots) {
      const proc = slot.worker?.process;
      if (proc && proc.exitCode === null && proc.signalCode === null) {
        this.#log.warn(`worker ${slot.index + 1} (pid ${proc.pid}) did not exit; killing it`);
        proc.kill('SIGKILL');
      }
    }
  }

  #checkAllExited(): void {
    if (this.#stopping && this.#slots.every((s) => s.worker === undefined)) this.#exits.resolve();
  }

  #fork(slot: Slot): void {
    slot.restartTimer = undefined;
    if (this.#stopping) return;
    const worker = cluster.fork();
    slot.worker = worker;
    slot.ready = false;
    slot.startedAt = Date.now();
    worker.on('message', (message: unknown) => {
      if (!isOurs(message)) return;
      const m = message as FromWorker;
      if (m.type === 'up:ready') {
        if (this.#stopping) {
          // Forked before the stop, loaded after it: it has nothing to serve or drain.
          const stop: ToWorker = { type: 'up:stop-now' };
          worker.send(stop);
          return;
        }
        slot.ready = true;
        this.#log.info(`worker ${slot.index + 1} (pid ${worker.process.pid}) is ready`);
        this.#o.onReady(slot.index, (msg) => worker.send(msg));
      } else if (m.type === 'up:response') {
        const done = this.#pending.get(m.id)?.done;
        this.#pending.delete(m.id);
        done?.(
          m.error === undefined
            ? { body: m.body }
            : { body: m.body, error: m.error, ...(m.code ? { code: m.code } : {}) },
        );
      } else {
        this.#o.onMessage(slot.index, m);
      }
    });
    worker.on('error', (err) => this.#log.warn(`worker ${slot.index + 1}: ${err.message}`));
    worker.on('exit', (code, signal) => this.#exited(slot, worker, code, signal));
  }

  /** Fails the requests a worker that exited can no longer answer (ERR_WORKER_EXITED). */
  #failPending(index: number, how: string): void {
    for (const [id, entry] of this.#pending) {
      if (entry.slot !== index) continue;
      this.#pending.delete(id);
      entry.done({
        body: undefined,
        error: `worker ${index + 1} exited (${how}) before it answered`,
        code: 'ERR_WORKER_EXITED',
      });
    }
  }

  #exited(slot: Slot, worker: Worker, code: number | null, signal: string | null): void {
    if (slot.worker !== worker) return;
    slot.worker = undefined;
    slot.ready = false;
    this.#failPending(slot.index, signal ? `signal ${signal}` : `code ${code}`);
    this.#o.onExit?.(slot.index);
    const how = signal ? `signal ${signal}` : `code ${code}`;
    if (this.#stopping) {
      this.#log.info(`worker ${slot.index + 1} (pid ${worker.process.pid}) exited (${how})`);
      this.#checkAllExited();
      return;
    }
    const lived = Date.now() - slot.startedAt;
    slot.earlyDeaths = lived >= WORKER_RESTART_RESET_MS ? 0 : slot.earlyDeaths + 1;
    const delay = restartDelay(slot.earlyDeaths);
    this.#restarts.inc({ worker: String(slot.index + 1) });
    this.#log.error(
      `worker ${slot.index + 1} (pid ${worker.process.pid}) died (${how}) after ${lived} ms; restarting it in ${delay} ms`,
    );
    slot.restartTimer = setTimeout(() => this.#fork(slot), delay);
  }
}

/** A worker's profile could not be had; `code` says why (a busy profiler: ERR_PROFILER_BUSY). */
export class WorkerProfileError extends Error {
  readonly code: string;
  constructor(message: string, code: string) {
    super(message);
    this.name = 'WorkerProfileError';
    this.code = code;
  }
}
