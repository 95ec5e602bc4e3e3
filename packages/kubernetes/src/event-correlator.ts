import type { EventType, ObjectReference } from '@userspace-proxy/core';
import { LruCache } from './lru.js';
import { TokenBucket } from './token-bucket.js';

/** The core/v1 Event this package writes (the fields it sets). Timestamps are RFC 3339 strings. */
export interface CoreV1EventBody {
  apiVersion: 'v1';
  kind: 'Event';
  metadata: { name: string; namespace: string };
  involvedObject: ObjectReference;
  reason: string;
  message: string;
  type: EventType;
  source: { component: string; host?: string };
  reportingComponent: string;
  reportingInstance: string;
  firstTimestamp: string;
  lastTimestamp: string;
  count: number;
}

/** What a repeat changes on the stored Event. */
export interface EventPatch {
  count: number;
  lastTimestamp: string;
  message: string;
}

/** What to do with one event after correlation. */
export type CorrelationResult =
  | { action: 'create'; event: CoreV1EventBody }
  | { action: 'patch'; event: CoreV1EventBody; patch: EventPatch }
  | { action: 'skip'; event: CoreV1EventBody };

/** Options of {@link EventCorrelator}; the defaults are client-go's. */
export interface EventCorrelatorOptions {
  /** Events one object may produce at once. Default 25. */
  burst?: number;
  /** Refill of that allowance, per second. Default 1/300 (one every 5 minutes). */
  refillPerSecond?: number;
  /** Distinct messages with the same reason before they are combined into one Event. Default 10. */
  maxSimilarEvents?: number;
  /** How long similar messages are remembered for combining. Default 600 000 (10 min). */
  similarWindowMs?: number;
  /** Entries in each cache (per object, per event). Default 4 096. */
  cacheSize?: number;
}

/** The defaults of {@link EventCorrelatorOptions}. */
export const DEFAULT_EVENT_CORRELATOR: Required<EventCorrelatorOptions> = {
  burst: 25,
  refillPerSecond: 1 / 300,
  maxSimilarEvents: 10,
  similarWindowMs: 600_000,
  cacheSize: 4096,
};

/** The prefix client-go puts on an Event that stands for several similar ones. */
export const COMBINED_PREFIX = '(combined from similar events): ';

interface SimilarRecord {
  messages: Set<string>;
  lastMs: number;
}

interface SeenRecord {
  name: string;
  count: number;
  firstTimestamp: string;
}

function objectKey(ev: CoreV1EventBody): string {
  const o = ev.involvedObject;
  return [
    ev.source.component,
    ev.source.host,
    o.kind,
    o.namespace,
    o.name,
    o.uid,
    o.apiVersion,
  ].join('\u0000');
}

/**
 * client-go's flood protection for Events, in three steps. (1) Aggregation: when an object gets more
 * than `maxSimilarEvents` different messages for one reason within the window, they are written as
 * one Event whose message says it is combined. (2) Counting: an Event identical to an earlier one
 * patches that Event's `count` and `lastTimestamp` instead of creating another. (3) Spam filter: a
 * token bucket per involved object drops what exceeds its allowance; dropped repeats are still
 * counted, so the next patch carries the true total. A proxy saying "NeedPods" a thousand times thus
 * costs the API server `burst` writes, then one per refill.
 */
export class EventCorrelator {
  readonly #opts: Required<EventCorrelatorOptions>;
  readonly #similar: LruCache<SimilarRecord>;
  readonly #seen: LruCache<SeenRecord>;
  readonly #buckets: LruCache<TokenBucket>;

  constructor(opts: EventCorrelatorOptions = {}) {
    this.#opts = { ...DEFAULT_EVENT_CORRELATOR, ...opts };
    this.#similar = new LruCache(this.#opts.cacheSize);
    this.#seen = new LruCache(this.#opts.cacheSize);
    this.#buckets = new LruCache(this.#opts.cacheSize);
  }

  /** Decides what `event` becomes at time `nowMs`. The event's own fields are not modified. */
  correlate(input: CoreV1EventBody, nowMs: number): CorrelationResult {
    const base = objectKey(input);
    const similarKey = [base, input.type, input.reason].join('\u0000');
    let similar = this.#similar.get(similarKey);
    if (!similar || nowMs - similar.lastMs > this.#opts.similarWindowMs) {
      similar = { messages: new Set(), lastMs: nowMs };
    }
    similar.lastMs = nowMs;
    similar.messages.add(input.message);
    this.#similar.set(similarKey, similar);

    let event = input;
    let seenKey = [similarKey, input.message].join('\u0000');
    if (similar.messages.size >= this.#opts.maxSimilarEvents) {
      // Keep the set bounded: it only has to stay at the threshold.
      const first = similar.messages.values().next().value as string;
      if (first !== input.message) similar.messages.delete(first);
      event = { ...input, message: COMBINED_PREFIX + input.message };
      seenKey = similarKey;
    }

    const seen = this.#seen.get(seenKey);
    let result: CorrelationResult;
    if (seen) {
      seen.count++;
      event = {
        ...event,
        metadata: { ...event.metadata, name: seen.name },
        firstTimestamp: seen.firstTimestamp,
        count: seen.count,
      };
      result = {
        action: 'patch',
        event,
        patch: { count: seen.count, lastTimestamp: event.lastTimestamp, message: event.message },
      };
    } else {
      this.#seen.set(seenKey, {
        name: event.metadata.name,
        count: 1,
        firstTimestamp: event.firstTimestamp,
      });
      event = { ...event, count: 1 };
      result = { action: 'create', event };
    }

    let bucket = this.#buckets.get(base);
    if (!bucket) {
      bucket = new TokenBucket(this.#opts.burst, this.#opts.refillPerSecond, nowMs);
      this.#buckets.set(base, bucket);
    }
    if (!bucket.tryTake(nowMs)) return { action: 'skip', event };
    return result;
  }
}
