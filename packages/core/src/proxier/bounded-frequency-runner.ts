import { InvalidOptionError } from '../errors.js';
import { componentLogger, type Logger } from '../logger.js';

/** Options of {@link BoundedFrequencyRunner}. */
export interface BoundedFrequencyRunnerOptions {
  /** Shown in every log line, e.g. "userspace-proxy-sync-runner". */
  name: string;
  /** The work. Runs never overlap, even when it returns a promise. */
  fn: () => void | Promise<void>;
  /** The shortest time between runs, apart from bursts. 0 lets every request run at once. */
  minIntervalMs: number;
  /**
   * The longest time between the end of one run and the start of the next: `fn` runs at least this
   * often even when nobody asks. Must be > 0 and ≥ `minIntervalMs`; `Infinity` turns periodic runs off.
   */
  maxIntervalMs: number;
  /** How many runs may happen back to back (a token bucket of this size, refilled 1 per minInterval). */
  burstRuns: number;
  /**
   * When `fn` throws or rejects, the next run is tried this long after it ended. Default
   * `minIntervalMs`, or 1 000 when that is 0, so that a failing `fn` never spins. Must be > 0.
   */
  errorRetryMs?: number;
  /** tslog-compatible; default silent. */
  logger?: Logger;
  /** A monotonic clock in ms. Default `performance.now` (which vitest's fake timers drive). */
  now?: () => number;
}

/** setTimeout's longest delay; longer waits are made of several timers. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Runs `fn` (the Proxier's sync) when asked, but at most once per `minIntervalMs` apart from
 * `burstRuns` back-to-back runs, and at least once per `maxIntervalMs`. It is what turns a storm of
 * Service events into a few syncs while still repairing drift periodically. Requests coalesce: any
 * number of `run()` calls while a run is rate-limited or in progress give one more run. Everything
 * happens on the event loop through one timer (the global `setTimeout`), with no background task
 * outside `loop()`.
 */
export class BoundedFrequencyRunner {
  readonly #name: string;
  readonly #fn: () => void | Promise<void>;
  readonly #minInterval: number;
  readonly #maxInterval: number;
  readonly #burst: number;
  readonly #errorRetry: number;
  readonly #now: () => number;
  readonly #log: Logger;

  /** Token bucket as a theoretical arrival time: a run is allowed when #tat - now ≤ (burst-1)·min. */
  #tat = Number.NEGATIVE_INFINITY;
  /** When the single timer is due: the next periodic run, a deferred request or a retry. */
  #deadline = Number.POSITIVE_INFINITY;
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** The earliest pending retryAfter() not yet applied to the timer (before loop() or during a run). */
  #retryAt: number | undefined;
  /** A run() not yet served. */
  #requested = false;
  #kickQueued = false;
  #looping = false;
  /** True from just before `fn` is called until its run has been accounted for. */
  #busy = false;
  /** Settles when the run in progress ends; loop() waits for it on shutdown. */
  #running: Promise<void> = Promise.resolve();

  /** @throws InvalidOptionError when an interval, the burst or `fn` is unusable. */
  constructor(opts: BoundedFrequencyRunnerOptions) {
    const { name, fn, minIntervalMs: min, maxIntervalMs: max, burstRuns: burst } = opts;
    if (typeof fn !== 'function') throw new InvalidOptionError('fn', 'must be a function');
    if (typeof min !== 'number' || !Number.isFinite(min) || min < 0) {
      throw new InvalidOptionError('minIntervalMs', `must be a finite number ≥ 0, got ${min}`);
    }
    if (typeof max !== 'number' || Number.isNaN(max) || max <= 0 || max < min) {
      throw new InvalidOptionError(
        'maxIntervalMs',
        `must be > 0 and ≥ minIntervalMs (${min}), got ${max}`,
      );
    }
    if (!Number.isInteger(burst) || burst < 1) {
      throw new InvalidOptionError('burstRuns', `must be an integer ≥ 1, got ${burst}`);
    }
    const errorRetry = opts.errorRetryMs ?? (min > 0 ? min : 1000);
    if (typeof errorRetry !== 'number' || !Number.isFinite(errorRetry) || errorRetry <= 0) {
      throw new InvalidOptionError(
        'errorRetryMs',
        `must be a finite number > 0, got ${errorRetry}`,
      );
    }
    this.#name = String(name);
    this.#fn = fn;
    this.#minInterval = min;
    this.#maxInterval = max;
    this.#burst = burst;
    this.#errorRetry = errorRetry;
    this.#now = opts.now ?? (() => performance.now());
    this.#log = componentLogger(opts.logger, this.#name);
  }

  /**
   * Asks for a run as soon as the rate limit allows. Never blocks and never calls `fn` on the
   * caller's stack (the run starts from a microtask), so event handlers can call it freely. Calls
   * coalesce; a call before `loop()` is remembered and served when the loop starts.
   */
  run(): void {
    this.#requested = true;
    this.#queueKick();
  }

  /**
   * Asks for a run `ms` from now unless one happens earlier; the earliest pending retry wins. A run
   * that happens before it (a request or a periodic run) cancels it, as in the Go runner. A retry
   * asked for during a run counts from the call and survives that run.
   */
  retryAfter(ms: number): void {
    if (typeof ms !== 'number' || Number.isNaN(ms)) {
      this.#log.warn(`ignoring retryAfter(${String(ms)}): not a number`);
      return;
    }
    const at = this.#now() + Math.max(0, ms);
    this.#retryAt = this.#retryAt === undefined ? at : Math.min(this.#retryAt, at);
    if (this.#looping && !this.#busy) {
      this.#applyRetry();
      this.#arm();
    }
  }

  /**
   * Serves requests, retries and periodic runs until `signal` aborts. It then clears its timer, waits
   * for a run in progress to end, and resolves. It may be called again after that; a second
   * concurrent loop is refused.
   * @throws InvalidOptionError (as a rejection) when a loop is already running.
   */
  async loop(signal: AbortSignal): Promise<void> {
    if (this.#looping) {
      throw new InvalidOptionError('loop', `runner ${this.#name} is already looping`);
    }
    if (signal.aborted) return;
    this.#looping = true;
    this.#deadline = this.#now() + this.#maxInterval;
    this.#applyRetry();
    this.#arm();
    if (this.#requested) this.#queueKick();
    await new Promise<void>((resolve) => {
      signal.addEventListener('abort', () => resolve(), { once: true });
    });
    this.#looping = false;
    this.#disarm();
    await this.#running;
  }

  #queueKick(): void {
    if (this.#kickQueued || !this.#looping || this.#busy) return;
    this.#kickQueued = true;
    queueMicrotask(() => {
      this.#kickQueued = false;
      if (!this.#looping || this.#busy || !this.#requested) return;
      this.#requested = false;
      this.#tryRun(this.#now());
    });
  }

  /** Runs now if the token bucket allows, else moves the timer to when it will. */
  #tryRun(now: number): void {
    if (this.#minInterval === 0) {
      this.#start();
      return;
    }
    const slack = (this.#burst - 1) * this.#minInterval;
    if (this.#tat - now <= slack) {
      this.#tat = Math.max(this.#tat, now) + this.#minInterval;
      this.#start();
      return;
    }
    const allowedAt = this.#tat - slack;
    this.#log.debug(`rate limited; the run is deferred by ${Math.ceil(allowedAt - now)} ms`);
    this.#deadline = Math.min(this.#deadline, allowedAt);
    this.#arm();
  }

  #start(): void {
    this.#disarm();
    // Set before `fn` is called: a synchronous fn that calls run() or retryAfter() must see it.
    this.#busy = true;
    this.#running = this.#execute();
  }

  async #execute(): Promise<void> {
    let failed = false;
    try {
      await this.#fn();
    } catch (error) {
      failed = true;
      this.#log.error(`run failed; retrying in ${this.#errorRetry} ms`, error);
    }
    const end = this.#now();
    this.#busy = false;
    if (failed) {
      const at = end + this.#errorRetry;
      this.#retryAt = this.#retryAt === undefined ? at : Math.min(this.#retryAt, at);
    }
    if (!this.#looping) return;
    this.#deadline = end + this.#maxInterval;
    this.#applyRetry();
    this.#arm();
    if (this.#requested) this.#queueKick();
  }

  #applyRetry(): void {
    if (this.#retryAt === undefined) return;
    this.#deadline = Math.min(this.#deadline, this.#retryAt);
    this.#retryAt = undefined;
  }

  /** (Re)sets the single timer for #deadline. */
  #arm(): void {
    this.#disarm();
    if (!this.#looping || this.#deadline === Number.POSITIVE_INFINITY) return;
    const delay = Math.min(Math.max(0, Math.ceil(this.#deadline - this.#now())), MAX_TIMER_MS);
    this.#timer = setTimeout(() => this.#onTimer(), delay);
  }

  #disarm(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
  }

  #onTimer(): void {
    this.#timer = undefined;
    if (!this.#looping || this.#busy) return;
    const now = this.#now();
    // Less than 1 ms early counts as due: timers round to whole ms, the clock does not.
    if (this.#deadline - now >= 1) {
      this.#arm();
      return;
    }
    const due = Math.max(now, this.#deadline);
    this.#deadline = Number.POSITIVE_INFINITY;
    this.#requested = false;
    this.#tryRun(due);
  }
}
