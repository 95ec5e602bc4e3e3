import { InvalidOptionError } from '../errors.js';

/**
 * Passive outlier ejection (issue 12): an endpoint that failed `consecutiveFailures` dials in a row
 * leaves its Service port's rotation for a back-off, so a blackholed endpoint stops costing every
 * n-th client a dial timeout. kube-proxy keeps such an endpoint in rotation; Envoy and HAProxy eject
 * it, and so do we. The back-off doubles while the endpoint keeps failing (its first dial after the
 * back-off is its probation: one failure ejects it again) and a success resets everything. At most
 * `maxEjectedPercent` of a port's endpoints are out at once, and never all of them: with every
 * endpoint dead, clients still get tried somewhere rather than refused by the proxy's own bookkeeping.
 */
export interface OutlierEjectionOptions {
  /** Consecutive dial failures that eject an endpoint. Default 3; 0 turns ejection off. */
  consecutiveFailures?: number;
  /** The first back-off, in ms. Default 1 000. */
  baseEjectionMs?: number;
  /** The longest back-off, in ms. Default 60 000. */
  maxEjectionMs?: number;
  /** The share of a port's endpoints that may be ejected at once, 0–100. Default 50. */
  maxEjectedPercent?: number;
}

/** The defaults of {@link OutlierEjectionOptions}. */
export const DEFAULT_OUTLIER_EJECTION = Object.freeze({
  consecutiveFailures: 3,
  baseEjectionMs: 1_000,
  maxEjectionMs: 60_000,
  maxEjectedPercent: 50,
});

/** Resolved options. */
export type OutlierSettings = Readonly<Required<OutlierEjectionOptions>>;

/** Checks and fills in the options; throws InvalidOptionError naming the bad one. */
export function outlierSettings(options: OutlierEjectionOptions = {}): OutlierSettings {
  const s = { ...DEFAULT_OUTLIER_EJECTION, ...options };
  const check = (name: keyof OutlierEjectionOptions, ok: boolean) => {
    if (!ok) throw new InvalidOptionError(`outlierEjection.${name}`, `got ${String(s[name])}`);
  };
  check(
    'consecutiveFailures',
    Number.isInteger(s.consecutiveFailures) && s.consecutiveFailures >= 0,
  );
  check('baseEjectionMs', Number.isFinite(s.baseEjectionMs) && s.baseEjectionMs > 0);
  check('maxEjectionMs', Number.isFinite(s.maxEjectionMs) && s.maxEjectionMs >= s.baseEjectionMs);
  check(
    'maxEjectedPercent',
    Number.isFinite(s.maxEjectedPercent) && s.maxEjectedPercent >= 0 && s.maxEjectedPercent <= 100,
  );
  return Object.freeze(s);
}

interface OutlierRecord {
  /** Failures since the last success. */
  failures: number;
  /** Ejected while `now < until`; 0 when never ejected. */
  until: number;
  /** The next ejection's length. */
  backoffMs: number;
}

/**
 * One Service port's failure records, created on its first reported failure so that ports whose
 * endpoints never fail cost nothing. Only endpoints with a failure since their last success have a
 * record, so its size is bounded by the port's endpoints.
 */
export class OutlierTracker {
  readonly #settings: OutlierSettings;
  readonly #records = new Map<string, OutlierRecord>();
  /**
   * The latest time any ejection ends: once `now` passes it nothing is ejected, so a pick can skip
   * every check.
   */
  #latestUntil = 0;

  constructor(settings: OutlierSettings) {
    this.#settings = settings;
  }

  /** Whether some endpoint may still be ejected at `now`: the pick's fast-path test. */
  active(now: number): boolean {
    return now < this.#latestUntil;
  }

  /** Whether `endpoint` is out of the rotation at `now`. */
  isEjected(endpoint: string, now: number): boolean {
    const record = this.#records.get(endpoint);
    return record !== undefined && now < record.until;
  }

  /** The endpoints out of the rotation at `now`, for status pages. */
  ejected(now: number): string[] {
    const out: string[] = [];
    for (const [endpoint, record] of this.#records) if (now < record.until) out.push(endpoint);
    return out;
  }

  /**
   * Records one dial's outcome. A success forgets the endpoint's record; a failure counts, and
   * ejects the endpoint once it reaches the threshold (again on each failure after its back-off,
   * for twice as long) when fewer than the cap of `endpointCount` are out.
   */
  report(endpoint: string, ok: boolean, now: number, endpointCount: number): void {
    if (ok) {
      this.#records.delete(endpoint);
      return;
    }
    const { consecutiveFailures, baseEjectionMs, maxEjectionMs, maxEjectedPercent } =
      this.#settings;
    let record = this.#records.get(endpoint);
    if (record === undefined) {
      record = { failures: 0, until: 0, backoffMs: baseEjectionMs };
      this.#records.set(endpoint, record);
    }
    record.failures++;
    if (consecutiveFailures === 0 || record.failures < consecutiveFailures) return;
    // Already out (a dial that started before the ejection): the back-off stands.
    if (now < record.until) return;
    const cap = Math.min(Math.floor((endpointCount * maxEjectedPercent) / 100), endpointCount - 1);
    if (this.ejected(now).length >= cap) return;
    record.until = now + record.backoffMs;
    record.backoffMs = Math.min(record.backoffMs * 2, maxEjectionMs);
    if (record.until > this.#latestUntil) this.#latestUntil = record.until;
  }

  /** Forgets the records of endpoints no longer in `present` (an endpoint change). */
  retain(present: ReadonlySet<string>): void {
    for (const endpoint of this.#records.keys()) {
      if (!present.has(endpoint)) this.#records.delete(endpoint);
    }
  }
}
