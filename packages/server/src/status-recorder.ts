import diagnosticsChannel from 'node:diagnostics_channel';
import {
  type AcceptErrorMessage,
  CHANNELS,
  type DialErrorMessage,
  type RefusedMessage,
  type SyncMessage,
} from '@userspace-proxy/core/diagnostics';
import { logSafe } from './log-safe.js';

/**
 * What the status page remembers that the metrics do not: the last sync's duration (the metric is a
 * histogram) and a bounded ring of recent errors (refusals, failed dials, failed accepts), each line
 * truncated and escaped as log lines are, because service names and error messages come from input.
 */

/** How many recent errors the status page keeps. */
export const STATUS_RECENT_ERRORS = 50;

/** Longest recent-error message kept. */
export const STATUS_ERROR_MAX_CHARS = 300;

/** One recent error. */
export interface RecentError {
  /** ISO 8601. */
  time: string;
  /** refused, dial-error or accept-error. */
  kind: string;
  /** "ns/name:port". */
  service: string;
  message: string;
}

/** Subscribes to core's channels; `close` unsubscribes. */
export class StatusRecorder {
  readonly #errors: RecentError[] = [];
  readonly #max: number;
  readonly #now: () => number;
  #last: { timestampSeconds: number; durationMs: number } | undefined;
  #syncs = 0;
  readonly #subs: [string, (m: unknown) => void][];

  constructor(options: { maxErrors?: number; now?: () => number } = {}) {
    this.#max = options.maxErrors ?? STATUS_RECENT_ERRORS;
    this.#now = options.now ?? Date.now;
    this.#subs = [
      [
        CHANNELS.sync,
        (m) => {
          this.#syncs++;
          this.#last = {
            timestampSeconds: this.#now() / 1000,
            durationMs: (m as SyncMessage).durationMs,
          };
        },
      ],
      [
        CHANNELS.refused,
        (m) => {
          const r = m as RefusedMessage;
          this.add('refused', r.service, `${r.reason}${r.detail ? ` (${r.detail})` : ''}`);
        },
      ],
      [
        CHANNELS.dialError,
        (m) => {
          const d = m as DialErrorMessage;
          this.add(
            'dial-error',
            d.service,
            `${d.endpoint}: ${d.error?.message ?? String(d.error)}`,
          );
        },
      ],
      [
        CHANNELS.acceptError,
        (m) => {
          const a = m as AcceptErrorMessage;
          this.add('accept-error', a.service, a.error?.message ?? String(a.error));
        },
      ],
    ];
    for (const [name, fn] of this.#subs) diagnosticsChannel.subscribe(name, fn);
  }

  /** Records an error line (also for the daemon's own warnings); the oldest falls off. */
  add(kind: string, service: string, message: string): void {
    this.#errors.push({
      time: new Date(this.#now()).toISOString(),
      kind: logSafe(kind, 40),
      service: logSafe(String(service)),
      message: logSafe(String(message), STATUS_ERROR_MAX_CHARS),
    });
    if (this.#errors.length > this.#max) this.#errors.splice(0, this.#errors.length - this.#max);
  }

  /** Newest first. */
  recentErrors(): RecentError[] {
    return [...this.#errors].reverse();
  }

  /** The last sync seen, if any. */
  lastSync(): { timestampSeconds: number; durationMs: number } | undefined {
    return this.#last;
  }

  /** Syncs seen. */
  syncCount(): number {
    return this.#syncs;
  }

  /** Unsubscribes. */
  close(): void {
    for (const [name, fn] of this.#subs) diagnosticsChannel.unsubscribe(name, fn);
  }
}
