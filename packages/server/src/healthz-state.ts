/**
 * The proxier health state machine behind /healthz and /livez, kube-proxy's "queued/updated" rule:
 * the proxy is unhealthy once a change has been queued and not applied for `healthTimeoutMs`
 * (2 × syncPeriod). An idle proxy that has nothing queued stays healthy forever, and so does one
 * that has never synced (so a slow first list does not fail a fresh Pod's probe before the sync loop
 * runs). The clock is injected so the rule is tested without waiting.
 */

/** Wall-clock milliseconds since the epoch; `Date` by default, a fake in tests. */
export interface Clock {
  now(): number;
}

/** The real clock. */
export const systemClock: Clock = { now: () => Date.now() };

/** Options of {@link ProxierHealth}. */
export interface ProxierHealthOptions {
  /** How long a queued change may wait before the proxy counts as unhealthy: 2 × syncPeriod. */
  healthTimeoutMs: number;
  clock?: Clock;
}

/** A snapshot for one response. */
export interface HealthStatus {
  healthy: boolean;
  /** When the last sync finished; undefined before the first (Go's zero time). */
  lastUpdated: number | undefined;
  currentTime: number;
}

/** Tracks queued and applied changes; one IP family, as kube-proxy up to 1.28 did. */
export class ProxierHealth {
  readonly #timeoutMs: number;
  readonly #clock: Clock;
  readonly #startedAt: number;
  #lastUpdated: number | undefined;
  #oldestPendingQueued: number | undefined;

  constructor(options: ProxierHealthOptions) {
    this.#timeoutMs = options.healthTimeoutMs;
    this.#clock = options.clock ?? systemClock;
    this.#startedAt = this.#clock.now();
  }

  /** When this tracker was made: the origin of the Go-style monotonic reading ("m=+…"). */
  get startedAt(): number {
    return this.#startedAt;
  }

  /** A change needs a sync. Only the oldest pending request counts, so a stream of changes cannot hide a stuck sync. */
  queuedUpdate(): void {
    this.#oldestPendingQueued ??= this.#clock.now();
  }

  /** A sync applied everything queued (also called once when the sync loop starts). */
  updated(): void {
    this.#oldestPendingQueued = undefined;
    this.#lastUpdated = this.#clock.now();
  }

  /** Healthy unless an update has waited `healthTimeoutMs` since the sync loop first reported in. */
  status(): HealthStatus {
    const now = this.#clock.now();
    const healthy =
      this.#lastUpdated === undefined ||
      this.#oldestPendingQueued === undefined ||
      now - this.#oldestPendingQueued < this.#timeoutMs;
    return { healthy, lastUpdated: this.#lastUpdated, currentTime: now };
  }
}

const pad = (n: number, width = 2) => String(n).padStart(width, '0');

/**
 * Go's `time.Time.String()` for a UTC time: "2020-06-03 23:59:53.688 +0000 UTC m=+202.631797660".
 * `undefined` is Go's zero time. The monotonic suffix is printed when `origin` is given, as Go prints
 * it for times read from the clock; it is seconds since `origin`.
 */
export function goTimeString(epochMs: number | undefined, origin?: number): string {
  if (epochMs === undefined) return '0001-01-01 00:00:00 +0000 UTC';
  const t = new Date(epochMs);
  const ms = t.getUTCMilliseconds();
  const frac = ms === 0 ? '' : `.${pad(ms, 3).replace(/0+$/, '')}`;
  const date = `${t.getUTCFullYear()}-${pad(t.getUTCMonth() + 1)}-${pad(t.getUTCDate())}`;
  const time = `${pad(t.getUTCHours())}:${pad(t.getUTCMinutes())}:${pad(t.getUTCSeconds())}${frac}`;
  const mono = origin === undefined ? '' : ` m=+${((epochMs - origin) / 1000).toFixed(9)}`;
  return `${date} ${time} +0000 UTC${mono}`;
}

/**
 * The /healthz or /livez body in kube-proxy 1.28–1.32's format, byte for byte (spacing included, no
 * trailing newline), which is what existing probes and dashboards parse. When healthy, lastUpdated is
 * reported as the current time, as kube-proxy does for compatibility with older releases.
 */
export function healthBody(status: HealthStatus, origin: number, nodeEligible?: boolean): string {
  const current = goTimeString(status.currentTime, origin);
  const last = status.healthy
    ? current
    : goTimeString(status.lastUpdated, status.lastUpdated === undefined ? undefined : origin);
  const base = `{"lastUpdated": ${JSON.stringify(last)},"currentTime": ${JSON.stringify(current)}`;
  return nodeEligible === undefined ? `${base}}` : `${base}, "nodeEligible": ${nodeEligible}}`;
}
