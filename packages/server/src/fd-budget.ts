import { readFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';

/**
 * The file descriptors the proxy needs most. The health and metrics servers share the process's
 * descriptor limit with the proxy (each proxied TCP connection takes two); left alone, idle HTTP
 * clients could take the last ones and stop all proxying (issue 12: 1 000 idle connections to the
 * health port under a 1 024 limit). The HTTP servers ask a {@link DescriptorBudget} before keeping a
 * connection and refuse it when the process is near its limit, so the last descriptors go to
 * proxying.
 */

/** Whether an HTTP server may keep one more connection. */
export interface DescriptorBudget {
  /** False when fewer than the reserve are free: the new connection is closed at once. */
  hasRoom(): boolean;
}

/**
 * Descriptors kept free for proxying: the HTTP servers refuse connections when fewer are free. A
 * quarter of the limit when that is less (a 256 limit keeps 64), so a small limit still leaves the
 * HTTP servers some room.
 */
export const DESCRIPTOR_RESERVE = 128;
/** How often the count of open descriptors is refreshed (in the background, never blocking). */
export const DESCRIPTOR_SAMPLE_MS = 1000;

/** The soft RLIMIT_NOFILE from /proc/self/limits ("Max open files  1024  4096  files"), if known. */
export function parseSoftNoFileLimit(limits: string): number | undefined {
  const line = /^Max open files\s+(\S+)/m.exec(limits);
  if (line === null || line[1] === 'unlimited') return undefined;
  const n = Number(line[1]);
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

/** Options of {@link ProcDescriptorBudget}. */
export interface ProcDescriptorBudgetOptions {
  /** Default {@link DESCRIPTOR_RESERVE} (or a quarter of the limit, when less). */
  reserve?: number;
  /** Default {@link DESCRIPTOR_SAMPLE_MS}. */
  sampleMs?: number;
  /** The soft limit; default read from /proc/self/limits (undefined: no limit known, no reserve). */
  limit?: () => number | undefined;
  /** Counts the open descriptors; default the entries of /proc/self/fd. */
  countOpen?: () => Promise<number>;
  now?: () => number;
}

function procSoftLimit(): number | undefined {
  try {
    return parseSoftNoFileLimit(readFileSync('/proc/self/limits', 'utf8'));
  } catch {
    return undefined; // not Linux: no reserve
  }
}

async function procOpenCount(): Promise<number> {
  return (await readdir('/proc/self/fd')).length;
}

/**
 * A budget from the soft limit and a sampled count of open descriptors (Linux; elsewhere it always
 * has room). The count is refreshed asynchronously at most every `sampleMs`; connections granted
 * since the last sample are added to it, so a burst cannot overshoot the reserve between samples.
 */
export class ProcDescriptorBudget implements DescriptorBudget {
  readonly #reserve: number;
  readonly #sampleMs: number;
  readonly #limit: number | undefined;
  readonly #countOpen: () => Promise<number>;
  readonly #now: () => number;
  #open = 0;
  #grantedSinceSample = 0;
  #sampledAt = Number.NEGATIVE_INFINITY;
  #sampling = false;

  constructor(options: ProcDescriptorBudgetOptions = {}) {
    this.#limit = (options.limit ?? procSoftLimit)();
    const quarter = Math.floor((this.#limit ?? 0) / 4);
    this.#reserve = options.reserve ?? Math.min(DESCRIPTOR_RESERVE, quarter);
    this.#sampleMs = options.sampleMs ?? DESCRIPTOR_SAMPLE_MS;
    this.#countOpen = options.countOpen ?? procOpenCount;
    this.#now = options.now ?? Date.now;
    if (this.#limit !== undefined) this.#sample();
  }

  /** The soft limit the budget works with, when known. */
  get limit(): number | undefined {
    return this.#limit;
  }

  /** The descriptors kept free for proxying. */
  get reserve(): number {
    return this.#reserve;
  }

  hasRoom(): boolean {
    if (this.#limit === undefined) return true;
    if (this.#now() - this.#sampledAt >= this.#sampleMs) this.#sample();
    const room = this.#open + this.#grantedSinceSample < this.#limit - this.#reserve;
    if (room) this.#grantedSinceSample++;
    return room;
  }

  #sample(): void {
    if (this.#sampling) return;
    this.#sampling = true;
    const startedAt = this.#now();
    this.#countOpen().then(
      (open) => {
        this.#open = open;
        this.#grantedSinceSample = 0;
        this.#sampledAt = startedAt;
        this.#sampling = false;
      },
      () => {
        this.#sampledAt = startedAt; // keep the last count; try again later
        this.#sampling = false;
      },
    );
  }
}
