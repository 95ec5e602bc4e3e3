import { createHash } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import {
  componentLogger,
  type Logger,
  type Service,
  servicePortNameString,
} from '@userspace-proxy/core';
import { Backoff, type BackoffOptions } from './backoff.js';
import { statusOf } from './event-sink.js';
import { LruCache } from './lru.js';
import { RequestTimeoutError, withRequestTimeout } from './request-timeout.js';
import { realTimers, sleep, type Timers } from './timers.js';
import { TokenBucket } from './token-bucket.js';
import {
  clientNodeUnidleClient,
  type JsonPatchOperation,
  type UnidleClient,
} from './unidle-client.js';
import { InFlight, type Outcome } from './unidle-in-flight.js';
import {
  DEFAULT_UNIDLE_TARGETS_LIMITS,
  IDLED_AT_ANNOTATION,
  type ParsedUnidleTargets,
  parseUnidleTargets,
  quoteForLog,
  UNIDLE_TARGETS_ANNOTATION,
  type UnidleTarget,
  type UnidleTargetsLimits,
} from './unidle-targets.js';
import {
  DEFAULT_UNIDLER_LIMITS,
  type KubernetesUnidlerOptions,
  type NeedPodsRequest,
  type UnidlerStats,
} from './unidler-options.js';

// A scale write in conflict is read again; a missing workload is reported by the caller.
const SCALE_RETRIES = { retryConflicts: true, quiet: [404] } as const;
// A patch whose test fails (422, or 409) means the annotation changed meanwhile: nothing to do.
const PATCH_RETRIES = { retryConflicts: false, quiet: [404, 409, 422] } as const;

type Attempted<T> = { ok: true; value: T } | { ok: false; status: number | undefined };

/**
 * The unidle hook for Kubernetes: when a held Service port needs pods, it reads the Service's
 * `idling.alpha.openshift.io/unidle-targets` annotation (written by `oc idle`) and scales each
 * Deployment, StatefulSet or ReplicaSet listed there back to its recorded replica count through the
 * `scale` subresource — only from 0, never down, and with the resource version it read, so a workload
 * someone else scaled meanwhile is left alone. It is what OpenShift's unidling controller does on a
 * NeedPods Event, done by the proxy itself so that no controller is needed.
 *
 * Calls come from every held connection's port and may repeat, so each target has a token bucket and
 * at most one request in flight (a second ask joins it). `needPods` never throws and never blocks;
 * the work runs in the background until it succeeds, is refused, runs out of attempts, or is aborted.
 * Structurally an `UnidleHook` of `@userspace-proxy/idler`.
 */
export class KubernetesUnidler {
  readonly #client: UnidleClient;
  readonly #limits: UnidleTargetsLimits;
  readonly #burst: number;
  readonly #refill: number;
  readonly #maxAttempts: number;
  readonly #requestTimeoutMs: number;
  readonly #backoff: BackoffOptions | undefined;
  readonly #clearAnnotations: boolean;
  readonly #timers: Timers;
  readonly #random: () => number;
  readonly #log: Logger;
  readonly #closing = new AbortController();
  readonly #buckets: LruCache<TokenBucket>;
  readonly #inFlight = new Map<string, InFlight>();
  readonly #clearing = new Set<string>();
  readonly #reported: LruCache<string>;
  readonly #running = new Set<Promise<unknown>>();
  readonly #stats: UnidlerStats = {
    requests: 0,
    scaled: 0,
    alreadyScaled: 0,
    notFound: 0,
    failed: 0,
    retries: 0,
    timeouts: 0,
    coalesced: 0,
    rateLimited: 0,
    invalidAnnotations: 0,
    annotationsCleared: 0,
  };

  /** Talks to the API with `client` (a KubeConfig: client-node's AppsV1Api and CoreV1Api). */
  constructor(client: KubeConfig | UnidleClient, opts: KubernetesUnidlerOptions = {}) {
    this.#client = isUnidleClient(client) ? client : clientNodeUnidleClient(client);
    this.#limits = {
      maxBytes: opts.maxBytes ?? DEFAULT_UNIDLE_TARGETS_LIMITS.maxBytes,
      maxTargets: opts.maxTargets ?? DEFAULT_UNIDLE_TARGETS_LIMITS.maxTargets,
    };
    this.#burst = Math.max(1, opts.burst ?? DEFAULT_UNIDLER_LIMITS.burst);
    this.#refill = opts.refillPerSecond ?? DEFAULT_UNIDLER_LIMITS.refillPerSecond;
    this.#maxAttempts = Math.max(1, opts.maxAttempts ?? DEFAULT_UNIDLER_LIMITS.maxAttempts);
    this.#requestTimeoutMs = opts.requestTimeoutMs ?? DEFAULT_UNIDLER_LIMITS.requestTimeoutMs;
    this.#backoff = opts.backoff;
    this.#clearAnnotations = opts.clearAnnotations ?? false;
    this.#timers = opts.timers ?? realTimers;
    this.#random = opts.random ?? Math.random;
    this.#log = componentLogger(opts.logger, 'unidler');
    const tracked = opts.maxTrackedTargets ?? DEFAULT_UNIDLER_LIMITS.maxTrackedTargets;
    this.#buckets = new LruCache(tracked);
    this.#reported = new LruCache(tracked);
    if (opts.signal?.aborted) this.#closing.abort();
    opts.signal?.addEventListener('abort', () => this.#closing.abort(), { once: true });
  }

  /** Asks for pods for `request.service`; returns at once. Never throws. */
  needPods(request: NeedPodsRequest): void {
    try {
      this.#needPods(request);
    } catch (err) {
      this.#log.warn('could not handle a request for pods', err);
    }
  }

  /** A snapshot of the counters. */
  get stats(): UnidlerStats {
    return { ...this.#stats };
  }

  /** Requests in flight now (for tests and diagnostics). */
  get inFlight(): number {
    return this.#inFlight.size;
  }

  /** Resolves once every request started so far has ended. */
  async settled(): Promise<void> {
    while (this.#running.size > 0) await Promise.allSettled([...this.#running]);
  }

  /** Stops every request in flight and ignores later ones; resolves once they have stopped. */
  async close(): Promise<void> {
    this.#closing.abort();
    await this.settled();
  }

  #needPods(request: NeedPodsRequest): void {
    const { service, servicePort, signal } = request ?? ({} as Partial<NeedPodsRequest>);
    if (this.#closing.signal.aborted || signal?.aborted) return;
    this.#stats.requests++;
    const name = service?.metadata?.name;
    if (typeof name !== 'string' || name === '') {
      this.#log.debug('ignoring a request for pods about an unnamed Service');
      return;
    }
    const namespace = service.metadata.namespace || 'default';
    const key = `${namespace}/${name}`;
    const raw = service.metadata.annotations?.[UNIDLE_TARGETS_ANNOTATION];
    const parsed = parseUnidleTargets(raw, key, this.#limits);
    if (parsed.error) this.#reportInvalid(key, raw, parsed.error.message);
    if (parsed.targets.length === 0) {
      this.#log.debug(`Service ${key} has no unidle targets; nothing to scale`);
      return;
    }
    const who =
      typeof servicePort?.name === 'string'
        ? `Service port ${servicePortNameString(servicePort)}`
        : `Service ${key}`;
    const outcomes = parsed.targets.map((t) => this.#ask(namespace, t, who, signal));
    if (!this.#clearAnnotations) return;
    this.#track(
      Promise.all(outcomes).then((done) => this.#clear(service, key, raw as string, parsed, done)),
    );
  }

  /** Logs and counts a refused value once per Service and value (remembered by digest, not copy). */
  #reportInvalid(key: string, raw: unknown, message: string): void {
    const text = typeof raw === 'string' ? raw : quoteForLog(raw);
    const value = createHash('sha256').update(text).digest('base64');
    if (this.#reported.get(key) === value) return;
    this.#reported.set(key, value);
    this.#stats.invalidAnnotations++;
    this.#log.warn(message);
  }

  /** Joins the target's request in flight, or starts one if its rate limit allows. */
  #ask(
    namespace: string,
    target: UnidleTarget,
    who: string,
    signal: AbortSignal | undefined,
  ): Promise<Outcome> {
    const key = `${namespace}/${target.kind}/${target.name}`;
    const running = this.#inFlight.get(key);
    if (running) {
      this.#stats.coalesced++;
      running.join(signal);
      return running.done;
    }
    const now = this.#timers.now();
    let bucket = this.#buckets.get(key);
    if (!bucket) {
      bucket = new TokenBucket(this.#burst, this.#refill, now);
      this.#buckets.set(key, bucket);
    }
    if (!bucket.tryTake(now)) {
      this.#stats.rateLimited++;
      this.#log.debug(`${target.kind} ${key}: rate limited; not asking the API server now`);
      return Promise.resolve('skipped');
    }
    const request = new InFlight(this.#closing.signal);
    request.join(signal);
    this.#inFlight.set(key, request);
    request.done = this.#scaleUp(namespace, target, who, request.signal).finally(() => {
      request.release();
      this.#inFlight.delete(key);
    });
    this.#track(request.done);
    return request.done;
  }

  async #scaleUp(
    namespace: string,
    target: UnidleTarget,
    who: string,
    signal: AbortSignal,
  ): Promise<Outcome> {
    const { kind, name, replicas } = target;
    const what = `${kind} ${namespace}/${name}`;
    const result = await this.#attempt(`scaling ${what}`, signal, SCALE_RETRIES, async () => {
      const scale = await this.#timed(`reading the scale of ${what}`, signal, (s) =>
        this.#client.readScale(kind, namespace, name, s),
      );
      const current = scale.spec?.replicas ?? 0;
      if (current > 0) return { current };
      const body = { ...scale, spec: { ...scale.spec, replicas } };
      await this.#timed(`writing the scale of ${what}`, signal, (s) =>
        this.#client.replaceScale(kind, namespace, name, body, s),
      );
      return { current };
    });
    if (result.ok && result.value.current > 0) {
      this.#stats.alreadyScaled++;
      this.#log.debug(`${what} has ${result.value.current} replica(s) already; leaving it alone`);
      return 'alreadyScaled';
    }
    if (result.ok) {
      this.#stats.scaled++;
      this.#log.info(`scaled ${what} from 0 to ${replicas} replica(s): ${who} needs pods`);
      return 'scaled';
    }
    if (signal.aborted) return 'aborted';
    if (result.status === 404) {
      this.#stats.notFound++;
      this.#log.info(`${what}, an unidle target, does not exist; skipping it`);
      return 'notFound';
    }
    this.#stats.failed++;
    return 'failed';
  }

  /**
   * Removes the targets that were handled (scaled up or missing) from the annotation, and `idled-at`
   * with the last one. The patch tests the annotation's value first, so a Service idled again
   * meanwhile is not touched.
   */
  async #clear(
    service: Service,
    key: string,
    raw: string,
    parsed: ParsedUnidleTargets,
    outcomes: Outcome[],
  ): Promise<void> {
    const handled = (i: number) => {
      const t = parsed.targetIndex[i] ?? -1;
      return t >= 0 && (outcomes[t] === 'scaled' || outcomes[t] === 'notFound');
    };
    if (!outcomes.includes('scaled') && !outcomes.includes('notFound')) return;
    if (this.#clearing.has(key) || this.#closing.signal.aborted) return;
    this.#clearing.add(key);
    try {
      const remaining = parsed.entries.filter((_, i) => !handled(i));
      const ops: JsonPatchOperation[] = [
        { op: 'test', path: annotationPath(UNIDLE_TARGETS_ANNOTATION), value: raw },
      ];
      if (remaining.length > 0) {
        const value = JSON.stringify(remaining);
        ops.push({ op: 'replace', path: annotationPath(UNIDLE_TARGETS_ANNOTATION), value });
      } else {
        ops.push({ op: 'remove', path: annotationPath(UNIDLE_TARGETS_ANNOTATION) });
        const idledAt = service.metadata.annotations?.[IDLED_AT_ANNOTATION];
        if (idledAt !== undefined) {
          const path = annotationPath(IDLED_AT_ANNOTATION);
          ops.push({ op: 'test', path, value: idledAt }, { op: 'remove', path });
        }
      }
      const namespace = service.metadata.namespace || 'default';
      const signal = this.#closing.signal;
      const what = `clearing the idling annotations of Service ${key}`;
      const result = await this.#attempt(what, signal, PATCH_RETRIES, () =>
        this.#timed(what, signal, (s) =>
          this.#client.patchService(namespace, service.metadata.name, ops, s),
        ),
      );
      if (result.ok) {
        this.#stats.annotationsCleared++;
        this.#log.info(
          remaining.length > 0
            ? `Service ${key}: ${remaining.length} unidle target(s) left in ${UNIDLE_TARGETS_ANNOTATION}`
            : `Service ${key}: removed ${UNIDLE_TARGETS_ANNOTATION} and ${IDLED_AT_ANNOTATION}`,
        );
      }
    } finally {
      this.#clearing.delete(key);
    }
  }

  /**
   * Runs `fn` until it succeeds, up to `maxAttempts` times while the server is unreachable, answers
   * 429 or 5xx, or (with `retryConflicts`) 409. Other answers end it at once, those in `quiet` with
   * no warning (the caller says what they mean).
   */
  async #attempt<T>(
    what: string,
    signal: AbortSignal,
    how: { retryConflicts: boolean; quiet: readonly number[] },
    fn: () => Promise<T>,
  ): Promise<Attempted<T>> {
    const backoff = new Backoff(this.#backoff, this.#timers.now, this.#random);
    for (let attempt = 1; ; attempt++) {
      try {
        return { ok: true, value: await fn() };
      } catch (err) {
        const status = statusOf(err);
        if (signal.aborted) return { ok: false, status };
        const conflict = status === 409 && how.retryConflicts;
        if (!conflict && status !== undefined && how.quiet.includes(status)) {
          this.#log.debug(`${what}: HTTP ${status}: ${brief(err)}`);
          return { ok: false, status };
        }
        const retriable = conflict || status === undefined || status === 429 || status >= 500;
        if (!retriable) {
          this.#log.warn(
            `${what}: the server refused (HTTP ${status}); not retrying: ${brief(err)}`,
          );
          return { ok: false, status };
        }
        if (attempt >= this.#maxAttempts) {
          this.#log.warn(`${what}: giving up after ${attempt} attempt(s): ${brief(err)}`);
          return { ok: false, status };
        }
        this.#stats.retries++;
        // A conflict means the workload changed since it was read: read it again at once.
        const delay = conflict ? 0 : backoff.next();
        this.#log.debug(`${what} failed (${brief(err)}); attempt ${attempt + 1} in ${delay} ms`);
        await sleep(this.#timers, delay, signal);
        if (signal.aborted) return { ok: false, status };
      }
    }
  }

  /** One request, bounded by `requestTimeoutMs` (counted in `timeouts` when it is reached). */
  #timed<T>(what: string, signal: AbortSignal, fn: (s: AbortSignal) => Promise<T>): Promise<T> {
    return withRequestTimeout(this.#timers, this.#requestTimeoutMs, what, signal, fn).catch(
      (err: unknown) => {
        if (err instanceof RequestTimeoutError) this.#stats.timeouts++;
        throw err;
      },
    );
  }

  #track(promise: Promise<unknown>): void {
    const tracked = promise.catch((err) => this.#log.warn('unidle request failed', err));
    this.#running.add(tracked);
    void tracked.finally(() => this.#running.delete(tracked));
  }
}

/** The JSON pointer of an annotation (RFC 6901: "~" and "/" escaped). */
function annotationPath(key: string): string {
  return `/metadata/annotations/${key.replaceAll('~', '~0').replaceAll('/', '~1')}`;
}

/** A short, escaped description of an error for one log line. */
function brief(err: unknown): string {
  const status = statusOf(err);
  const message = err instanceof Error ? err.message : err;
  return `${status === undefined ? '' : `HTTP ${status}, `}${quoteForLog(message)}`;
}

function isUnidleClient(value: KubeConfig | UnidleClient): value is UnidleClient {
  const c = value as UnidleClient;
  return typeof c.readScale === 'function' && typeof c.replaceScale === 'function';
}
