import type { KubeConfig } from '@kubernetes/client-node';
import {
  componentLogger,
  type EventRecorder,
  type EventType,
  type Logger,
  type ObjectReference,
} from '@userspace-proxy/core';
import {
  type CoreV1EventBody,
  type CorrelationResult,
  EventCorrelator,
  type EventCorrelatorOptions,
} from './event-correlator.js';
import { clientNodeEventSink, type EventSink, statusOf } from './event-sink.js';
import { realTimers, sleep, type Timers } from './timers.js';

/** Options of {@link KubernetesEventRecorder}; every one has a default. */
export interface KubernetesEventRecorderOptions extends EventCorrelatorOptions {
  /** `source.component` and `reportingComponent`. Default "userspace-proxy". */
  component?: string;
  /** `source.host` and `reportingInstance`: the node name. Default: none. */
  host?: string;
  /** Writes waiting for the API server; more are dropped (and counted). Default 1 000 (client-go's). */
  maxQueued?: number;
  /** Attempts per write while the server cannot be reached. Default 12 (client-go's). */
  maxAttempts?: number;
  /** Wait between attempts; the first wait is a random part of it. Default 10 000 (client-go's). */
  retryIntervalMs?: number;
  /** Longer reasons are cut to this. Default 128. */
  maxReasonLength?: number;
  /** Longer messages are cut to this. Default 1 024 (the API's limit for events.k8s.io notes). */
  maxMessageLength?: number;
  timers?: Timers;
  random?: () => number;
  logger?: Logger;
}

/** Counters, for logs and metrics. */
export interface EventRecorderStats {
  /** Events written (created or patched). */
  written: number;
  /** Events the correlator's spam filter held back (their repeats are still counted). */
  skipped: number;
  /** Writes dropped because the queue was full. */
  dropped: number;
  /** Writes given up after the server refused them or stayed unreachable. */
  failed: number;
}

type Write = Exclude<CorrelationResult, { action: 'skip' }>;

function rfc3339(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/**
 * An {@link EventRecorder} that writes core/v1 Events about Services and the Node, so `kubectl
 * describe` shows what the proxy saw. It never blocks and never throws: events are correlated at once
 * (see {@link EventCorrelator}), and those that pass go through a bounded queue, written one at a
 * time, with retries while the API server is unreachable.
 */
export class KubernetesEventRecorder implements EventRecorder {
  readonly #sink: EventSink;
  readonly #correlator: EventCorrelator;
  readonly #component: string;
  readonly #host: string | undefined;
  readonly #maxQueued: number;
  readonly #maxAttempts: number;
  readonly #retryIntervalMs: number;
  readonly #maxReason: number;
  readonly #maxMessage: number;
  readonly #timers: Timers;
  readonly #random: () => number;
  readonly #log: Logger;
  readonly #queue: Write[] = [];
  readonly #closing = new AbortController();
  readonly #stats: EventRecorderStats = { written: 0, skipped: 0, dropped: 0, failed: 0 };
  #draining: Promise<void> | undefined;
  #seq = 0n;

  constructor(sink: EventSink | KubeConfig, opts: KubernetesEventRecorderOptions = {}) {
    this.#sink = isSink(sink) ? sink : clientNodeEventSink(sink);
    this.#correlator = new EventCorrelator(opts);
    this.#component = opts.component ?? 'userspace-proxy';
    this.#host = opts.host;
    this.#maxQueued = opts.maxQueued ?? 1000;
    this.#maxAttempts = Math.max(1, opts.maxAttempts ?? 12);
    this.#retryIntervalMs = opts.retryIntervalMs ?? 10_000;
    this.#maxReason = opts.maxReasonLength ?? 128;
    this.#maxMessage = opts.maxMessageLength ?? 1024;
    this.#timers = opts.timers ?? realTimers;
    this.#random = opts.random ?? Math.random;
    this.#log = componentLogger(opts.logger, 'events');
  }

  event(ref: ObjectReference, type: EventType, reason: string, message: string): void {
    try {
      this.#record(ref, type, reason, message);
    } catch (err) {
      this.#log.warn('could not record an event', err);
    }
  }

  /** A snapshot of the counters. */
  get stats(): EventRecorderStats {
    return { ...this.#stats };
  }

  /** Resolves once every queued write has been attempted. */
  async flush(): Promise<void> {
    while (this.#draining) await this.#draining;
  }

  /** Stops writing; queued events are dropped. Events recorded later are ignored. */
  async close(): Promise<void> {
    this.#closing.abort();
    this.#queue.length = 0;
    await this.#draining;
  }

  #record(ref: ObjectReference, type: EventType, reason: string, message: string): void {
    if (this.#closing.signal.aborted) return;
    if (typeof ref?.name !== 'string' || ref.name === '' || typeof ref.kind !== 'string') {
      this.#log.warn(`dropping event ${String(reason)} about an unnamed object`);
      return;
    }
    const now = this.#timers.now();
    const ts = rfc3339(now);
    const nanos = BigInt(now) * 1_000_000n + (this.#seq++ % 1_000_000n);
    const source = this.#host
      ? { component: this.#component, host: this.#host }
      : { component: this.#component };
    const event: CoreV1EventBody = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: {
        name: `${ref.name}.${nanos.toString(16)}`,
        namespace: ref.namespace || 'default',
      },
      involvedObject: { ...ref },
      reason: String(reason).slice(0, this.#maxReason),
      message: String(message).slice(0, this.#maxMessage),
      type: type === 'Warning' ? 'Warning' : 'Normal',
      source,
      reportingComponent: this.#component,
      reportingInstance: this.#host ?? '',
      firstTimestamp: ts,
      lastTimestamp: ts,
      count: 1,
    };
    this.#log.debug(
      `Event(${ref.kind} ${event.metadata.namespace}/${ref.name}): type: '${event.type}' reason: '${event.reason}' ${event.message}`,
    );
    const result = this.#correlator.correlate(event, now);
    if (result.action === 'skip') {
      this.#stats.skipped++;
      return;
    }
    if (this.#queue.length >= this.#maxQueued) {
      this.#stats.dropped++;
      if (this.#stats.dropped === 1 || this.#stats.dropped % 100 === 0) {
        this.#log.warn(
          `event queue full (${this.#maxQueued}); ${this.#stats.dropped} event(s) dropped so far`,
        );
      }
      return;
    }
    this.#queue.push(result);
    this.#draining ??= this.#drain().finally(() => {
      this.#draining = undefined;
    });
  }

  async #drain(): Promise<void> {
    for (let w = this.#queue.shift(); w && !this.#closing.signal.aborted; w = this.#queue.shift()) {
      await this.#write(w);
    }
  }

  async #write(w: Write): Promise<void> {
    const { event } = w;
    const what = `${event.reason} about ${event.involvedObject.kind} ${event.metadata.namespace}/${event.involvedObject.name}`;
    for (let attempt = 1; ; attempt++) {
      try {
        if (w.action === 'patch') {
          try {
            await this.#sink.patch(event.metadata.namespace, event.metadata.name, w.patch);
          } catch (err) {
            // The Event may have expired (1 h TTL) or never been written: create it afresh.
            if (statusOf(err) !== 404) throw err;
            await this.#sink.create(event);
          }
        } else {
          await this.#sink.create(event);
        }
        this.#stats.written++;
        return;
      } catch (err) {
        const status = statusOf(err);
        if (status === 409 && w.action === 'create') return; // written by an earlier attempt
        const retriable = status === undefined || status === 429 || status >= 500;
        if (!retriable) {
          this.#stats.failed++;
          this.#log.warn(`server rejected event ${what} (HTTP ${status}); not retrying`);
          return;
        }
        if (attempt >= this.#maxAttempts || this.#closing.signal.aborted) {
          this.#stats.failed++;
          this.#log.warn(`giving up on event ${what} after ${attempt} attempt(s)`, err);
          return;
        }
        const delay =
          attempt === 1
            ? Math.round(this.#random() * this.#retryIntervalMs)
            : this.#retryIntervalMs;
        this.#log.debug(`writing event ${what} failed; retrying in ${delay} ms`);
        await sleep(this.#timers, delay, this.#closing.signal);
        if (this.#closing.signal.aborted) return;
      }
    }
  }
}

function isSink(value: EventSink | KubeConfig): value is EventSink {
  return (
    typeof (value as EventSink).create === 'function' &&
    typeof (value as EventSink).patch === 'function'
  );
}
