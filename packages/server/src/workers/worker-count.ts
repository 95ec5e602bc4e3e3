import { availableParallelism } from 'node:os';
import type { KubeProxyConfiguration } from '../config-schema.js';
import { effectiveProxyMode } from '../config-schema.js';

/**
 * How many data-path processes the daemon runs (`--workers`). One is today's single process,
 * exactly; more fork `node:cluster` workers that share the listening sockets while the primary
 * keeps the sources (workers/primary.ts).
 */

/** The most workers `--workers` accepts: beyond it the primary's fan-out costs more than it gives. */
export const MAX_WORKERS = 64;

/** `auto` is one worker per core, at most this many (the fan-out of state is per worker). */
export const MAX_AUTO_WORKERS = 8;

/** The count a configuration asks for, and why it may be less than asked. */
export interface WorkerCount {
  count: number;
  /** Set when the count was lowered (redirect mode); the daemon logs it at start. */
  reason?: string;
}

/** Resolves `userspaceProxy.workers` for this machine and mode. */
export function resolveWorkerCount(
  config: KubeProxyConfiguration,
  cores: () => number = availableParallelism,
): WorkerCount {
  const asked = config.userspaceProxy.workers;
  const count = asked === 'auto' ? Math.max(1, Math.min(cores(), MAX_AUTO_WORKERS)) : asked;
  if (count > 1 && effectiveProxyMode(config) === 'userspace') {
    // iptables rules and proxy-port allocation have one owner; a second worker would race it.
    return {
      count: 1,
      reason: `redirect mode (--proxy-mode userspace) serves with 1 worker, not ${count}: iptables and the proxy ports have one owner`,
    };
  }
  return { count };
}
