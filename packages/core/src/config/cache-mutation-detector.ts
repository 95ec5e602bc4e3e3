import { CacheMutationError } from '../errors.js';
import { componentLogger, type Logger } from '../logger.js';

/**
 * Finds handlers that change the objects they are given. A config fan-out hands the same object to
 * every handler, and the informer behind it may keep it in its cache; a handler that "just sets a
 * default" on it silently changes what every other handler and every later update sees. client-go
 * has the same opt-in detector (KUBE_CACHE_MUTATION_DETECTOR) for the same reason. It costs a deep
 * copy per delivered object, so it is off unless asked for: turn it on in tests and in development.
 */

/** The environment variable client-go reads; "true" (or "1") turns detection on. */
export const CACHE_MUTATION_DETECTOR_ENV = 'KUBE_CACHE_MUTATION_DETECTOR';

/** Default time between two checks of every watched object. */
export const DEFAULT_MUTATION_CHECK_INTERVAL_MS = 10_000;

/** Default number of objects watched at once; the oldest is forgotten beyond it. */
export const DEFAULT_MUTATION_MAX_WATCHED = 50_000;

/** True when `env` asks for mutation detection, as client-go's variable does. */
export function mutationDetectionFromEnv(
  env: Record<string, string | undefined> = process.env,
): boolean {
  const value = env[CACHE_MUTATION_DETECTOR_ENV]?.trim().toLowerCase();
  return value === 'true' || value === '1';
}

/** The timer functions the periodic check uses; inject fakes in tests. */
export interface IntervalTimers {
  /** As the global setInterval; returns a handle for clearInterval. */
  setInterval(callback: () => void, ms: number): unknown;
  /** As the global clearInterval. */
  clearInterval(handle: unknown): void;
}

const defaultTimers: IntervalTimers = {
  setInterval: (callback, ms) => setInterval(callback, ms),
  clearInterval: (handle) => clearInterval(handle as NodeJS.Timeout),
};

/** Options of {@link CacheMutationDetector}; every one has a default. */
export interface CacheMutationDetectorOptions {
  /** The kind named in reports ("Service"). */
  kind: string;
  /** Called with every mutation found, after it is logged. Errors it throws are logged. */
  onMutation?: (error: CacheMutationError) => void;
  /** Time between periodic checks. Default {@link DEFAULT_MUTATION_CHECK_INTERVAL_MS}. */
  checkIntervalMs?: number;
  /** Objects watched at once. Default {@link DEFAULT_MUTATION_MAX_WATCHED}. */
  maxWatched?: number;
  /** Default: the global setInterval / clearInterval (the handle is unref'd). */
  timers?: IntervalTimers;
  /** tslog-compatible; default silent. */
  logger?: Logger;
}

interface Watched {
  key: string;
  copy: unknown;
}

/**
 * Keeps a deep copy of each watched object and reports a {@link CacheMutationError} when the object
 * no longer equals it: when asked (`verify`, right after handlers return) and on a periodic check
 * (`start`), which catches handlers that keep an object and change it later.
 */
export class CacheMutationDetector {
  readonly #kind: string;
  readonly #onMutation: ((error: CacheMutationError) => void) | undefined;
  readonly #intervalMs: number;
  readonly #maxWatched: number;
  readonly #timers: IntervalTimers;
  readonly #log: Logger;
  /** Watched objects by identity, oldest first. */
  readonly #watched = new Map<object, Watched>();
  #timer: unknown;

  constructor(options: CacheMutationDetectorOptions) {
    this.#kind = options.kind;
    this.#onMutation = options.onMutation;
    this.#intervalMs = options.checkIntervalMs ?? DEFAULT_MUTATION_CHECK_INTERVAL_MS;
    this.#maxWatched = options.maxWatched ?? DEFAULT_MUTATION_MAX_WATCHED;
    this.#timers = options.timers ?? defaultTimers;
    this.#log = componentLogger(options.logger, 'cache-mutation-detector');
  }

  /** How many objects are watched now. */
  get size(): number {
    return this.#watched.size;
  }

  /**
   * Starts watching `obj`, known as `key`, from its current state. Watching an object already
   * watched keeps the first copy, so a mutation in between is still found.
   */
  watch(key: string, obj: unknown): void {
    if (typeof obj !== 'object' || obj === null || this.#watched.has(obj)) return;
    let copy: unknown;
    try {
      copy = structuredClone(obj);
    } catch (err) {
      this.#log.debug(`cannot watch ${this.#kind} ${key} for mutations: it cannot be copied`, err);
      return;
    }
    this.#watched.set(obj, { key, copy });
    if (this.#watched.size > this.#maxWatched) {
      const oldest = this.#watched.keys().next().value;
      if (oldest !== undefined) this.#watched.delete(oldest);
    }
  }

  /** Compares `obj` with its copy now; a mutation is reported once, then the copy follows it. */
  verify(obj: unknown): void {
    if (typeof obj !== 'object' || obj === null) return;
    const entry = this.#watched.get(obj);
    if (!entry) return;
    const path = findDifference(entry.copy, obj);
    if (path === undefined) return;
    this.#report(new CacheMutationError(this.#kind, entry.key, path));
    try {
      entry.copy = structuredClone(obj);
    } catch {
      // The mutation made it uncopyable (a function was stored on it): stop watching it.
      this.#watched.delete(obj);
    }
  }

  /** Verifies `obj` a last time and stops watching it: it is no longer the current state. */
  release(obj: unknown): void {
    this.verify(obj);
    if (typeof obj === 'object' && obj !== null) this.#watched.delete(obj);
  }

  /** Verifies every watched object. */
  verifyAll(): void {
    for (const obj of [...this.#watched.keys()]) this.verify(obj);
  }

  /** Starts the periodic check, until `stop()` or until `signal` aborts. Idempotent. */
  start(signal?: AbortSignal): void {
    if (this.#timer !== undefined || signal?.aborted) return;
    this.#timer = this.#timers.setInterval(() => this.verifyAll(), this.#intervalMs);
    (this.#timer as { unref?: () => void } | undefined)?.unref?.();
    signal?.addEventListener('abort', () => this.stop(), { once: true });
  }

  /** Stops the periodic check. */
  stop(): void {
    if (this.#timer === undefined) return;
    this.#timers.clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #report(error: CacheMutationError): void {
    this.#log.error(error.message);
    try {
      this.#onMutation?.(error);
    } catch (err) {
      this.#log.error('onMutation callback threw', err);
    }
  }
}

/**
 * The path of the first difference between two JSON-like values (`spec.ports[0].port`, "" for the
 * values themselves), or undefined when they are equal. Handles cycles, Dates, Maps and Sets; an
 * absent key equals an `undefined` one; prototypes are ignored (a copy loses them). Iterative, so a
 * deep object cannot overflow the stack; never throws (an unreadable value counts as a difference).
 */
export function findDifference(a: unknown, b: unknown): string | undefined {
  const stack: [unknown, unknown, string][] = [[a, b, '']];
  const seen = new Map<object, Set<object>>();
  let path = '';
  try {
    for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
      const [x, y, at] = item;
      path = at;
      if (Object.is(x, y)) continue;
      if (typeof x !== 'object' || typeof y !== 'object' || x === null || y === null) return at;
      const pairs = seen.get(x) ?? new Set<object>();
      if (pairs.has(y)) continue;
      pairs.add(y);
      seen.set(x, pairs);
      if (x instanceof Date || y instanceof Date) {
        if (!(x instanceof Date && y instanceof Date) || !Object.is(x.getTime(), y.getTime())) {
          return at;
        }
        continue;
      }
      if (x instanceof Map || x instanceof Set || y instanceof Map || y instanceof Set) {
        if (x.constructor !== y.constructor) return at;
        stack.push([[...(x as Map<unknown, unknown>)], [...(y as Map<unknown, unknown>)], at]);
        continue;
      }
      if (Array.isArray(x) !== Array.isArray(y)) return at;
      if (Array.isArray(x) && Array.isArray(y)) {
        if (x.length !== y.length) return `${at}.length`.replace(/^\./, '');
        for (let i = x.length - 1; i >= 0; i--) stack.push([x[i], y[i], `${at}[${i}]`]);
        continue;
      }
      const xr = x as Record<string, unknown>;
      const yr = y as Record<string, unknown>;
      const keys = new Set([...Object.keys(xr), ...Object.keys(yr)]);
      for (const key of [...keys].reverse()) {
        stack.push([xr[key], yr[key], at === '' ? key : `${at}.${key}`]);
      }
    }
    return undefined;
  } catch {
    return path;
  }
}
