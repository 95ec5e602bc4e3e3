import type { EventRecorder, Logger } from '@userspace-proxy/core';
import { InvalidOptionError } from '@userspace-proxy/core';
import type { UnidleHook } from './unidle-hook.js';

/**
 * Options of an {@link Idler}. Every limit has a default (below, with its reason); docs/idling.md
 * lists them for users.
 */
export interface IdlerOptions {
  /**
   * TCP: clients held at most per Service port (across its listeners). One more evicts the oldest,
   * refused with reason `hold-evicted`, logged and counted. Default 16, OpenShift's
   * `MaxHeldConnections`.
   */
  maxHeldPerServicePort?: number;
  /**
   * TCP: clients held at most across every idling socket sharing this Idler's budget. Beyond it a
   * new client of an idled Service is refused at once (reason `hold-limit`): a held client costs a
   * descriptor and a few KiB, and a flood of them must not exhaust the process. Default 10 000.
   */
  maxHeldTotal?: number;
  /**
   * TCP: how long one client is held at most, from the moment it was held; then it is refused with
   * reason `hold-timeout`. Exact per connection (one timer per Service port, armed for its oldest
   * client). Default 120 000, OpenShift's `needPodsWaitTimeout`.
   */
  holdTimeoutMs?: number;
  /**
   * How often NeedPods is asked for again while a Service port still holds clients and has no
   * endpoints (the reference asks once per listener and can wait forever), and the shortest gap
   * between two NeedPods of one Service port. Default 60 000.
   */
  needPodsIntervalMs?: number;
  /**
   * UDP: a datagram that arrives this long after the previous one starts a new burst and asks for
   * pods again (the reference's per-burst rule). Default 120 000.
   */
  udpBurstGapMs?: number;
  /**
   * UDP: datagrams kept per Service port while it has no endpoints, replayed in order (with their
   * client's address) once it has. Default 0: dropped, as the reference does; clients retransmit.
   */
  udpBufferDatagrams?: number;
  /** UDP: bytes kept at most per Service port in that buffer. Default 65 536. */
  udpBufferBytes?: number;
  /**
   * TCP: hand-over dials in flight at most across the proxy (each holds a descriptor and a dial
   * timer until its endpoint answers or it fails); more start as those end, oldest held first.
   * Thousands of dials started at once would arm their first-attempt timers before the event loop
   * could see a single connect complete, so every first attempt would time out; a bound also keeps
   * the descriptors a hand-over needs on top of the held clients small. Default 256.
   */
  handOverConcurrency?: number;
  /** Where NeedPods Events go. Default: none recorded (the hook may still act). */
  recorder?: EventRecorder;
  /** Asked for pods beside the Event (a real unidler: `KubernetesUnidler`). Default: none. */
  unidleHook?: UnidleHook;
  /** Where the idler logs (named `idler`). Default: silent. */
  logger?: Logger;
  /** Monotonic clock, ms. Default `performance.now` (vi.useFakeTimers can fake it). */
  now?: () => number;
}

/** The defaults of {@link IdlerOptions}. */
export const DEFAULT_IDLER_OPTIONS = {
  maxHeldPerServicePort: 16,
  maxHeldTotal: 10_000,
  holdTimeoutMs: 120_000,
  needPodsIntervalMs: 60_000,
  udpBurstGapMs: 120_000,
  udpBufferDatagrams: 0,
  udpBufferBytes: 65_536,
  handOverConcurrency: 256,
} as const;

/** {@link IdlerOptions} with the limits filled in. */
export interface ResolvedIdlerOptions {
  readonly maxHeldPerServicePort: number;
  readonly maxHeldTotal: number;
  readonly holdTimeoutMs: number;
  readonly needPodsIntervalMs: number;
  readonly udpBurstGapMs: number;
  readonly udpBufferDatagrams: number;
  readonly udpBufferBytes: number;
  readonly handOverConcurrency: number;
}

/**
 * Fills in the defaults and checks every limit, so a bad value fails when the Idler is made.
 * @throws InvalidOptionError naming the option.
 */
export function resolveIdlerOptions(opts: IdlerOptions): ResolvedIdlerOptions {
  const d = DEFAULT_IDLER_OPTIONS;
  const int = (
    name: keyof IdlerOptions,
    value: number | undefined,
    fallback: number,
    min: number,
  ) => {
    const v = value ?? fallback;
    if (!Number.isSafeInteger(v) || v < min) {
      throw new InvalidOptionError(name, `must be an integer of at least ${min}, got ${String(v)}`);
    }
    return v;
  };
  const ms = (name: keyof IdlerOptions, value: number | undefined, fallback: number) => {
    const v = value ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
      throw new InvalidOptionError(name, `must be a positive number of ms, got ${String(v)}`);
    }
    return v;
  };
  return {
    maxHeldPerServicePort: int(
      'maxHeldPerServicePort',
      opts.maxHeldPerServicePort,
      d.maxHeldPerServicePort,
      1,
    ),
    maxHeldTotal: int('maxHeldTotal', opts.maxHeldTotal, d.maxHeldTotal, 1),
    holdTimeoutMs: ms('holdTimeoutMs', opts.holdTimeoutMs, d.holdTimeoutMs),
    needPodsIntervalMs: ms('needPodsIntervalMs', opts.needPodsIntervalMs, d.needPodsIntervalMs),
    udpBurstGapMs: ms('udpBurstGapMs', opts.udpBurstGapMs, d.udpBurstGapMs),
    udpBufferDatagrams: int('udpBufferDatagrams', opts.udpBufferDatagrams, d.udpBufferDatagrams, 0),
    udpBufferBytes: int('udpBufferBytes', opts.udpBufferBytes, d.udpBufferBytes, 1),
    handOverConcurrency: int(
      'handOverConcurrency',
      opts.handOverConcurrency,
      d.handOverConcurrency,
      1,
    ),
  };
}
