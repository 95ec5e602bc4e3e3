import { type KubeConfig, Watch } from '@kubernetes/client-node';
import { componentLogger, type Logger } from '@userspace-proxy/core';
import { quoteForLog } from '@userspace-proxy/core/diagnostics';
import type { ObjectTransform } from './object-transform.js';
import { acceptObject } from './object-validation.js';
import { realTimers, sleep, type Timers } from './timers.js';

/** Options of {@link GuardedWatch}; every one has a default. */
export interface GuardedWatchOptions {
  /** The kind watched, for logs. */
  kind?: string;
  /** A watch that ends cleanly sooner than this counts as short. Default 1 000. */
  minWatchMs?: number;
  /** The first delay after a short watch; doubles per short watch in a row. Default 100. */
  shortWatchDelayMs?: number;
  /** The ceiling of that delay. Default 10 000. */
  maxShortWatchDelayMs?: number;
  /**
   * Server-side watch timeout is chosen at random in [min, 2 × min] seconds per watch, as client-go
   * does, so that every watch ends and resumes even through a proxy that never closes. Default 300.
   */
  minTimeoutSeconds?: number;
  /** A watch still open this long after its server-side timeout is presumed dead and aborted. Default 60 000. */
  stallGraceMs?: number;
  /**
   * Applied to the object of every accepted ADDED, MODIFIED and DELETED event before the informer
   * sees it: see object-transform.ts. Default none (objects as parsed).
   */
  transform?: ObjectTransform;
  timers?: Timers;
  random?: () => number;
  logger?: Logger;
}

/**
 * What a watch calls per event, in client-node's `Watch.watch` shape (the phase, the object, the raw
 * event), so GuardedWatch can stand in where client-node's informer expects a Watch.
 */
export type WatchCallback = (phase: string, apiObj: unknown, watchObj?: unknown) => unknown;

/**
 * client-node's `Watch` with the guards a long-running proxy needs. client-node re-watches at once,
 * with no back-off, whenever a watch ends cleanly: against a server (or proxy) that closes at once
 * that is hundreds of requests per second, so short watches in a row are spaced out here. Watches ask
 * for bookmarks and a server-side timeout; one that outlives its timeout (a half-open connection) is
 * aborted. Malformed events are dropped before they reach the cache (client-node would throw from an
 * async callback, an unhandled rejection), and a watch that cannot even be set up reports an error
 * through `done` instead of rejecting inside client-node's loop.
 */
export class GuardedWatch extends Watch {
  readonly #opts: Required<Omit<GuardedWatchOptions, 'logger' | 'kind' | 'transform'>>;
  readonly #transform: ObjectTransform | undefined;
  readonly #kind: string;
  readonly #log: Logger;
  readonly #active = new Set<AbortController>();
  #closing = new AbortController();
  #shortInARow = 0;
  #unknownEventTypes = 0;

  /** Counters, for logs and metrics: events dropped because their type is none the API defines. */
  get stats(): { unknownEventTypes: number } {
    return { unknownEventTypes: this.#unknownEventTypes };
  }

  constructor(config: KubeConfig, opts: GuardedWatchOptions = {}) {
    super(config);
    this.#kind = opts.kind ?? 'object';
    this.#transform = opts.transform;
    this.#log = componentLogger(opts.logger, `watch:${this.#kind}`);
    this.#opts = {
      minWatchMs: opts.minWatchMs ?? 1_000,
      shortWatchDelayMs: opts.shortWatchDelayMs ?? 100,
      maxShortWatchDelayMs: opts.maxShortWatchDelayMs ?? 10_000,
      minTimeoutSeconds: opts.minTimeoutSeconds ?? 300,
      stallGraceMs: opts.stallGraceMs ?? 60_000,
      timers: opts.timers ?? realTimers,
      random: opts.random ?? Math.random,
    };
  }

  /** Aborts every open watch and refuses new ones: the informer's loop ends. */
  close(): void {
    this.#closing.abort();
    for (const c of this.#active) c.abort();
    this.#active.clear();
  }

  /** Lets watches start again after {@link close}, for an informer that is restarted. */
  reopen(): void {
    if (this.#closing.signal.aborted) this.#closing = new AbortController();
  }

  override async watch(
    path: string,
    queryParams: Record<string, string | number | boolean | undefined>,
    callback: WatchCallback,
    done: (err: unknown) => void,
  ): Promise<AbortController> {
    const { timers } = this.#opts;
    if (this.#shortInARow > 0) {
      const delay = Math.min(
        this.#opts.maxShortWatchDelayMs,
        this.#opts.shortWatchDelayMs * 2 ** (this.#shortInARow - 1),
      );
      this.#log.debug(`${this.#shortInARow} short watch(es) in a row; waiting ${delay} ms`);
      await sleep(timers, delay, this.#closing.signal);
    }
    if (this.#closing.signal.aborted) return abortedController();

    const timeoutSeconds = Math.round(this.#opts.minTimeoutSeconds * (1 + this.#opts.random()));
    const params = { ...queryParams, allowWatchBookmarks: true, timeoutSeconds };
    const startedAt = timers.now();
    let finished = false;
    let stallTimer: unknown;
    let controller: AbortController | undefined;
    const finish = (err: unknown) => {
      if (finished) return;
      finished = true;
      timers.clearTimeout(stallTimer);
      if (controller) this.#active.delete(controller);
      if (err) this.#shortInARow = 0;
      else if (timers.now() - startedAt < this.#opts.minWatchMs) this.#shortInARow++;
      else this.#shortInARow = 0;
      done(err);
    };
    try {
      controller = await super.watch(
        path,
        params,
        (phase, obj, raw) => this.#deliver(callback, phase, obj, raw),
        finish,
      );
    } catch (err) {
      queueMicrotask(() => finish(err));
      return abortedController();
    }
    if (finished) return controller;
    if (this.#closing.signal.aborted) {
      controller.abort();
      return controller;
    }
    this.#active.add(controller);
    const stalled = controller;
    stallTimer = timers.setTimeout(
      () => {
        this.#log.warn(`watch of ${path} outlived its ${timeoutSeconds} s timeout; reconnecting`);
        stalled.abort();
        finish(new Error(`watch of ${path} stalled`));
      },
      timeoutSeconds * 1000 + this.#opts.stallGraceMs,
    );
    return controller;
  }

  #deliver(callback: WatchCallback, phase: string, obj: unknown, raw: unknown): void {
    if (phase === 'ERROR') {
      // A Status object; client-node reads `code` (410 means "relist"). Anything else is harmless.
      const status = typeof obj === 'object' && obj !== null ? obj : {};
      this.#log.info(`watch ERROR event: ${JSON.stringify(status).slice(0, 300)}`);
      return void guard(callback('ERROR', status, raw), this.#log);
    }
    if (phase === 'BOOKMARK') {
      const rv = (obj as { metadata?: { resourceVersion?: unknown } } | null)?.metadata
        ?.resourceVersion;
      if (typeof rv !== 'string' || rv === '') return;
      return void guard(callback(phase, { metadata: { resourceVersion: rv } }, raw), this.#log);
    }
    if (phase !== 'ADDED' && phase !== 'MODIFIED' && phase !== 'DELETED') {
      this.#unknownEventTypes++;
      this.#log.warn(`ignoring watch event of unknown type ${quoteForLog(phase, 64)}`);
      return;
    }
    if (!acceptObject(this.#log, this.#kind, obj)) return;
    guard(callback(phase, this.#transform ? this.#transform(obj) : obj, raw), this.#log);
  }
}

/** client-node's watch handler is async: a throw inside it must not become an unhandled rejection. */
function guard(result: unknown, log: Logger): void {
  if (result instanceof Promise)
    result.catch((err: unknown) => log.error('watch handler threw', err));
}

function abortedController(): AbortController {
  const c = new AbortController();
  c.abort();
  return c;
}
