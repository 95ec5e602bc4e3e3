import type { Logger, Service, ServicePortName } from '@userspace-proxy/core';
import type { BackoffOptions } from './backoff.js';
import type { Timers } from './timers.js';
import type { UnidleTargetsLimits } from './unidle-targets.js';

/**
 * What the idling socket passes when a held Service port needs pods: the shape of the idler's
 * `UnidleHook.needPods` argument, repeated here so this package does not depend on the idler.
 */
export interface NeedPodsRequest {
  /** The Service as the proxy last saw it; its annotations name the targets. */
  service: Service;
  /** The port whose clients are held: for logs. */
  servicePort: ServicePortName;
  /** Stops the work started for this request (once every request that joined it has aborted). */
  signal?: AbortSignal;
}

/** Options of {@link KubernetesUnidler}; every one has a default. */
export interface KubernetesUnidlerOptions extends UnidleTargetsLimits {
  /** Scale requests a target may get at once. Default 2. */
  burst?: number;
  /** Then this many per second, per target. Default 0.1 (one every 10 s). */
  refillPerSecond?: number;
  /** Attempts per target and request while the server is unreachable, busy or in conflict. Default 5. */
  maxAttempts?: number;
  /** The wait between attempts. Default `DEFAULT_BACKOFF`: 0.8 s × 2ⁿ up to 30 s, + up to 100 % jitter. */
  backoff?: BackoffOptions;
  /**
   * After a scale-up, remove the targets it handled from `unidle-targets` (and `idled-at` with the last
   * one), as OpenShift's unidling controller does. Needs `patch` on `services`. Default false.
   */
  clearAnnotations?: boolean;
  /** Targets whose rate limit is remembered (least recently used forgotten). Default 4 096. */
  maxTrackedTargets?: number;
  /**
   * How long one scale read, scale write or Service patch may take before it counts as failed (and
   * is retried with back-off): a server that never answers must not hold a target's one request in
   * flight for ever. Default 30 000 ms.
   */
  requestTimeoutMs?: number;
  /** Stops everything, as {@link KubernetesUnidler.close} does. */
  signal?: AbortSignal;
  timers?: Timers;
  random?: () => number;
  logger?: Logger;
}

/** The defaults of the rate limit and retries of {@link KubernetesUnidlerOptions}. */
export const DEFAULT_UNIDLER_LIMITS = {
  burst: 2,
  refillPerSecond: 0.1,
  maxAttempts: 5,
  maxTrackedTargets: 4096,
  requestTimeoutMs: 30_000,
} as const;

/** Counters, for logs and metrics. */
export interface UnidlerStats {
  /** `needPods` calls. */
  requests: number;
  /** Targets scaled from 0 to their recorded replicas. */
  scaled: number;
  /** Targets found with replicas already above 0, left alone. */
  alreadyScaled: number;
  /** Targets that do not exist (404), skipped. */
  notFound: number;
  /** Targets given up on: refused by the server, or still failing after `maxAttempts`. */
  failed: number;
  /** Attempts repeated after a failure. */
  retries: number;
  /** Requests that did not answer within `requestTimeoutMs`. */
  timeouts: number;
  /** Asks for a target that had a request in flight, joined to it. */
  coalesced: number;
  /** Asks for a target its rate limit held back (the idler asks again while it holds clients). */
  rateLimited: number;
  /** Distinct invalid `unidle-targets` values seen (each logged once). */
  invalidAnnotations: number;
  /** Services whose idling annotations were cleared or rewritten (`clearAnnotations`). */
  annotationsCleared: number;
}
