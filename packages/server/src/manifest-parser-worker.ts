import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker, type WorkerOptions } from 'node:worker_threads';
import { formatDuration } from './duration.js';
import type { ManifestParseResult } from './manifest-parse.js';
import type { ManifestParser } from './manifest-parser.js';
import type { ParseRequest } from './manifest-worker.js';

/**
 * The daemon's {@link ManifestParser}: parses on a worker thread, so the event loop that proxies is
 * never blocked by a manifest, whatever its size or shape. The thread is started on the first parse,
 * kept while reloads come, and ended after a quiet minute. A parse that runs longer than its budget,
 * or runs out of the thread's heap, ends the thread and becomes an error ("the last good state keeps
 * serving"); the next parse starts a new thread.
 */

/** How long one parse may run before the file is refused. */
export const MANIFEST_PARSE_TIMEOUT_MS = 60_000;
/** The worker thread's heap limit: a 16 MiB manifest of plain objects needs well under this. */
export const MANIFEST_PARSE_HEAP_MB = 1024;
/** How long an idle worker thread is kept for the next reload. */
export const MANIFEST_WORKER_IDLE_MS = 60_000;

/** Options of {@link WorkerManifestParser}. */
export interface WorkerManifestParserOptions {
  /** Default {@link MANIFEST_PARSE_TIMEOUT_MS}. */
  timeoutMs?: number;
  /** Default {@link MANIFEST_PARSE_HEAP_MB}. */
  heapMb?: number;
  /** Default {@link MANIFEST_WORKER_IDLE_MS}. */
  idleMs?: number;
  /** Starts the thread; default {@link startManifestWorker}. */
  startWorker?: (options: WorkerOptions) => Worker;
}

/**
 * Starts the worker thread. From the build it runs manifest-worker.js; from source (tests, `tsx`)
 * the worker is TypeScript, which a worker thread cannot load by itself: it registers tsx (a
 * development dependency) first, and resolves workspace packages to their sources as the parent does.
 */
export function startManifestWorker(options: WorkerOptions): Worker {
  const self = import.meta.url;
  if (!self.endsWith('.ts')) return new Worker(new URL('./manifest-worker.js', self), options);
  const target = new URL('./manifest-worker.ts', self).href;
  const tsxApi = createRequire(self)
    .resolve('tsx/esm/api')
    .replace(/\.cjs$/, '.mjs');
  const bootstrap = `import(${JSON.stringify(pathToFileURL(tsxApi).href)})
    .then((tsx) => { tsx.register(); return import(${JSON.stringify(target)}); })`;
  return new Worker(bootstrap, {
    ...options,
    eval: true,
    execArgv: [...process.execArgv, '--conditions=@userspace-proxy/source'],
  });
}

interface Pending {
  resolve: (result: ManifestParseResult) => void;
  timer: ReturnType<typeof setTimeout>;
}

const failure = (error: string): ManifestParseResult => ({
  ok: false,
  errors: [error],
  warnings: [],
});

/** Parses manifests on a worker thread; see the module comment. */
export class WorkerManifestParser implements ManifestParser {
  readonly #timeoutMs: number;
  readonly #heapMb: number;
  readonly #idleMs: number;
  readonly #start: (options: WorkerOptions) => Worker;
  readonly #pending = new Map<number, Pending>();
  #worker: Worker | undefined;
  #idle: ReturnType<typeof setTimeout> | undefined;
  #nextId = 1;

  constructor(options: WorkerManifestParserOptions = {}) {
    this.#timeoutMs = options.timeoutMs ?? MANIFEST_PARSE_TIMEOUT_MS;
    this.#heapMb = options.heapMb ?? MANIFEST_PARSE_HEAP_MB;
    this.#idleMs = options.idleMs ?? MANIFEST_WORKER_IDLE_MS;
    this.#start = options.startWorker ?? startManifestWorker;
  }

  parse(text: string): Promise<ManifestParseResult> {
    if (this.#idle !== undefined) clearTimeout(this.#idle);
    this.#idle = undefined;
    let worker: Worker;
    try {
      worker = this.#ensureWorker();
    } catch (err) {
      return Promise.resolve(failure(`cannot start the parser thread: ${(err as Error).message}`));
    }
    worker.ref();
    const id = this.#nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#end(
          `parsing took longer than the limit of ${formatDuration(this.#timeoutMs)}; the file was not applied`,
        );
      }, this.#timeoutMs);
      this.#pending.set(id, { resolve, timer });
      worker.postMessage({ id, text } satisfies ParseRequest);
    });
  }

  close(): void {
    this.#end('the parser was closed');
  }

  #ensureWorker(): Worker {
    if (this.#worker !== undefined) return this.#worker;
    const worker = this.#start({ resourceLimits: { maxOldGenerationSizeMb: this.#heapMb } });
    this.#worker = worker;
    worker.on('message', (reply: { id: number; result: ManifestParseResult }) => {
      const pending = this.#pending.get(reply.id);
      if (pending === undefined) return;
      this.#pending.delete(reply.id);
      clearTimeout(pending.timer);
      pending.resolve(reply.result);
      if (this.#pending.size === 0) this.#quiet(worker);
    });
    worker.on('error', (err: Error & { code?: string }) => {
      if (this.#worker !== worker) return;
      const why =
        err.code === 'ERR_WORKER_OUT_OF_MEMORY'
          ? `parsing needed more than the limit of ${this.#heapMb} MiB of memory`
          : `the parser thread failed: ${err.message}`;
      this.#end(`${why}; the file was not applied`);
    });
    worker.on('exit', () => {
      if (this.#worker === worker) this.#end('the parser thread exited; the file was not applied');
    });
    return worker;
  }

  /** No parse waiting: let the process exit without it, and end it after the idle time. */
  #quiet(worker: Worker): void {
    worker.unref();
    this.#idle = setTimeout(() => {
      if (this.#worker === worker && this.#pending.size === 0) this.#end('idle');
    }, this.#idleMs);
    this.#idle.unref();
  }

  /** Ends the thread; every parse still waiting gets `error`. */
  #end(error: string): void {
    const worker = this.#worker;
    this.#worker = undefined;
    if (this.#idle !== undefined) clearTimeout(this.#idle);
    this.#idle = undefined;
    for (const [id, pending] of this.#pending) {
      this.#pending.delete(id);
      clearTimeout(pending.timer);
      pending.resolve(failure(error));
    }
    if (worker !== undefined) void worker.terminate();
  }
}
