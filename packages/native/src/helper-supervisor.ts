/**
 * The life of one factory's helper, whatever it relays (NativeTcpEngine's, NativeUdpEngine's):
 * started once for the first socket, stopped when the engine is idle or closed, told apart when
 * it exits (stopped on purpose, or died), and restarted with back-off after a death until its
 * sockets listen again. What the helper's death means for sockets stays the engine's.
 */
import type { Logger } from '@userspace-proxy/core';
import { NativeHelperError } from './errors.js';
import {
  type HelperChild,
  type HelperProtocol,
  MAX_RESTART_DELAY_MS,
  RestartBackoff,
} from './helper-process.js';

/** What a supervisor needs from its engine. */
export interface HelperSupervisorOptions<H extends HelperChild> {
  readonly protocol: HelperProtocol;
  /** Starts a helper (resolves once it said hello). */
  readonly start: () => Promise<H>;
  /** A started helper, before anything uses it (the TCP engine sends its limits). */
  readonly started?: (h: H) => void;
  /** First restart delay, ms, doubling up to 5 s. */
  readonly restartBackoffMs: number;
  /** Every start is counted here (the engine counts deaths: it knows when one matters). */
  readonly counters: { helperStarts: number };
  /** True while sockets want a helper: a restart is pointless otherwise. */
  readonly wanted: () => boolean;
  /**
   * Listens again for every socket on a restarted helper; false when it died meanwhile (its
   * exit schedules the next restart), true once done.
   */
  readonly relisten: (h: H) => Promise<boolean>;
  readonly logger?: Logger | undefined;
}

/**
 * A helper that stayed up this long resets the restart back-off when it dies (as the daemon's
 * WORKER_RESTART_RESET_MS): a helper that crashes at every start backs off to 5 s instead of
 * restarting every `restartBackoffMs` forever.
 */
export const HELPER_RESTART_RESET_MS = 30_000;

/** How a helper's exit came about, from {@link HelperSupervisor.exited}. */
export type HelperExit = 'replaced' | 'stopped' | 'died';

/** See the module comment. */
export class HelperSupervisor<H extends HelperChild> {
  readonly #o: HelperSupervisorOptions<H>;
  #helper: H | undefined;
  #starting: Promise<H> | undefined;
  readonly #stopping = new Set<H>();
  #onStopped: (() => void) | undefined;
  /** The one close in progress or done: a second close() waits for the same exit. */
  #closing: Promise<void> | undefined;
  readonly #backoff: RestartBackoff;
  #restartTimer: NodeJS.Timeout | undefined;
  /** When the running (or last) helper started, on the monotonic clock. */
  #startedAt = 0;
  /** Sockets down since the last death (for the log line of a restart that failed). */
  #down = 0;
  #closed = false;
  #logger: Logger | undefined;

  constructor(o: HelperSupervisorOptions<H>) {
    this.#o = o;
    this.#logger = o.logger;
    this.#backoff = new RestartBackoff(o.restartBackoffMs);
  }

  /** The running helper (undefined when none runs or it is being stopped). */
  get helper(): H | undefined {
    return this.#helper;
  }

  /** True once {@link close} was called: no helper starts again. */
  get closed(): boolean {
    return this.#closed;
  }

  /** The running helper, started (once, however many ask at once) when none runs. */
  async ensure(logger: Logger): Promise<H> {
    this.#logger ??= logger;
    if (this.#closed) throw new NativeHelperError('closed', { protocol: this.#o.protocol });
    if (this.#helper !== undefined && !this.#helper.isExited) return this.#helper;
    this.#starting ??= this.#o
      .start()
      .then((h) => {
        this.#o.counters.helperStarts++;
        this.#startedAt = performance.now();
        this.#helper = h;
        this.#o.started?.(h);
        return h;
      })
      .finally(() => {
        this.#starting = undefined;
      });
    return this.#starting;
  }

  /** Stops the running helper when `idle` (nothing uses it); its exit is then 'stopped'. */
  stopIfIdle(idle: boolean): void {
    const h = this.#helper;
    if (h === undefined || !idle) return;
    this.#helper = undefined;
    this.#stopping.add(h);
    h.stop();
  }

  /** Stops the helper for good; resolves once it exited (at once when none runs). Idempotent. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#restartTimer);
    const starting = this.#starting;
    if (starting !== undefined) await starting.catch(() => undefined);
    const h = this.#helper;
    if (h === undefined || h.isExited) return;
    await new Promise<void>((resolve) => {
      this.#stopping.add(h);
      this.#onStopped = resolve;
      h.stop();
    });
  }

  /**
   * A helper exited: 'replaced' when it was an older one stopped on purpose (nothing to do),
   * 'stopped' when the current one was, 'died' otherwise. Either of the last two leaves no
   * helper running.
   */
  exited(): HelperExit {
    const intentional = [...this.#stopping].find((h) => h.isExited);
    if (intentional !== undefined) {
      this.#stopping.delete(intentional);
      this.#onStopped?.();
      this.#onStopped = undefined;
      if (intentional !== this.#helper) return 'replaced';
    }
    this.#helper = undefined;
    return intentional !== undefined ? 'stopped' : 'died';
  }

  /**
   * After a death: restarts the helper after the next back-off delay, while sockets want it. The
   * back-off starts over only for a helper that had stayed up {@link HELPER_RESTART_RESET_MS}.
   * This is the one line logged per death (`why`, and how many sockets are down until then).
   */
  scheduleRestart(why = 'it exited', socketsDown = 0): void {
    if (this.#closed || !this.#o.wanted()) return;
    if (performance.now() - this.#startedAt >= HELPER_RESTART_RESET_MS) this.#backoff.reset();
    const delay = this.#backoff.next();
    this.#down = socketsDown;
    const down = socketsDown > 0 ? `; ${socketsDown} socket(s) down until then` : '';
    this.#logger?.error(
      `the native ${this.#o.protocol} helper is down (${why}); restarting it in ${delay} ms${down}`,
    );
    clearTimeout(this.#restartTimer);
    this.#restartTimer = setTimeout(() => void this.#restart(), delay);
  }

  async #restart(): Promise<void> {
    if (this.#closed || !this.#o.wanted()) return;
    let h: H;
    try {
      h = await this.ensure(this.#logger as Logger);
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      // A failed start is no helper that stayed up: the back-off goes on doubling from here.
      this.#startedAt = performance.now();
      this.scheduleRestart(`it failed to start again: ${why}`, this.#down);
      return;
    }
    // The back-off starts over once this helper stayed up a while (see scheduleRestart).
    await this.#o.relisten(h);
  }
}

/** What {@link relistenAll} retries a failed listen with, and where it counts the failures. */
export interface RelistenRetry {
  /** First retry delay, ms (the factory's restartBackoffMs), doubling up to 5 s. */
  readonly firstMs: number;
  /** Every failed listen after a restart is counted here (the first and each retry). */
  readonly counters: { relistenFailures: number };
}

/**
 * Listens again on a restarted helper for each socket of `sockets` whose `where` is known, in
 * order, telling each how it went (`onRelisten`: undefined, or `failed`'s error for the errno); a
 * socket closed meanwhile (`open` false) has its new listener closed instead. A listen that
 * failed (another process took the port meanwhile) is retried after `retry.firstMs`, doubling up
 * to 5 s, for as long as the socket is open and that helper runs: the Proxier thinks the socket
 * is open, so nothing else would ever listen again. False as soon as the helper died again (its
 * exit schedules the next restart), true once every socket is done.
 */
export async function relistenAll<W>(
  h: HelperChild & { closeListener(listener: number): Promise<void> },
  sockets: ReadonlyMap<number, { onRelisten(error: unknown, attempt?: number): void }>,
  where: ReadonlyMap<number, W>,
  listen: (listener: number, where: W) => Promise<{ errno: number }>,
  open: (listener: number) => boolean,
  failed: (errno: number, where: W) => Error,
  retry: RelistenRetry,
): Promise<boolean> {
  for (const [listener, socket] of sockets) {
    const w = where.get(listener);
    if (w === undefined) continue;
    const r = await listen(listener, w);
    if (h.isExited) return false;
    if (!open(listener)) {
      void h.closeListener(listener); // closed meanwhile
      continue;
    }
    if (r.errno === 0) {
      socket.onRelisten(undefined);
      continue;
    }
    retry.counters.relistenFailures++;
    socket.onRelisten(failed(r.errno, w), 1);
    const again = (attempt: number, delay: number): void => {
      const timer = setTimeout(async () => {
        const now = where.get(listener);
        if (h.isExited || !open(listener) || now === undefined) return;
        const r2 = await listen(listener, now);
        if (h.isExited) return;
        if (!open(listener)) {
          if (r2.errno === 0) void h.closeListener(listener);
          return;
        }
        if (r2.errno === 0) {
          socket.onRelisten(undefined, attempt);
          return;
        }
        retry.counters.relistenFailures++;
        socket.onRelisten(failed(r2.errno, now), attempt);
        again(attempt + 1, Math.min(MAX_RESTART_DELAY_MS, delay * 2));
      }, delay);
      timer.unref();
    };
    again(2, retry.firstMs);
  }
  return true;
}

/** " (attempt N)" for a listen that succeeded on a retry, for the log line saying so. */
export function relistenAttempt(attempt: number): string {
  return attempt > 1 ? ` (attempt ${attempt})` : '';
}
