import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { InvalidOptionError } from '../errors.js';
import type { Logger } from '../logger.js';
import {
  BoundedFrequencyRunner,
  type BoundedFrequencyRunnerOptions,
} from './bounded-frequency-runner.js';

/** Milliseconds since the test started, on the faked clock. */
let t0 = 0;
const elapsed = (): number => performance.now() - t0;

/** Advances the fake clock to `t` ms after the start, running timers and microtasks on the way. */
async function at(t: number): Promise<void> {
  const delta = t - elapsed();
  if (delta < 0) throw new Error(`cannot go back from ${elapsed()} to ${t}`);
  await vi.advanceTimersByTimeAsync(delta);
}

interface Harness {
  runner: BoundedFrequencyRunner;
  /** Start times of every run, relative to the test start. */
  runs: number[];
  abort: AbortController;
  done: Promise<void>;
}

/** A runner over a synchronous fn that records when it ran, with its loop started at t = 0. */
function start(
  opts: Partial<BoundedFrequencyRunnerOptions> & Pick<BoundedFrequencyRunnerOptions, 'burstRuns'>,
  { loop = true }: { loop?: boolean } = {},
): Harness {
  const runs: number[] = [];
  const runner = new BoundedFrequencyRunner({
    name: 'test-runner',
    fn: () => {
      runs.push(elapsed());
    },
    minIntervalMs: 1000,
    maxIntervalMs: 10_000,
    ...opts,
  });
  const abort = new AbortController();
  const done = loop ? runner.loop(abort.signal) : Promise.resolve();
  return { runner, runs, abort, done };
}

function recordingLogger(): Logger & { calls: Record<string, unknown[][]> } {
  const calls: Record<string, unknown[][]> = {};
  const record =
    (level: string) =>
    (...args: unknown[]) => {
      calls[level] ??= [];
      calls[level].push(args);
    };
  const logger = {
    calls,
    silly: record('silly'),
    trace: record('trace'),
    debug: record('debug'),
    info: record('info'),
    warn: record('warn'),
    error: record('error'),
    fatal: record('fatal'),
    getSubLogger: () => logger,
  };
  return logger;
}

beforeEach(() => {
  vi.useFakeTimers();
  t0 = performance.now();
});

afterEach(() => {
  vi.useRealTimers();
});

describe('BoundedFrequencyRunner: the reference timeline (min 1 s, max 10 s, burst 1)', () => {
  it('runs at once, defers to 1 s, keeps 1 s, then runs every 10 s after the last run', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 1 });

    runner.run(); // t = 0: runs immediately
    await at(0);
    expect(runs).toEqual([0]);

    await at(500);
    runner.run(); // deferred to 1 s
    await at(999);
    runner.run(); // keeps 1 s
    await at(999);
    expect(runs).toEqual([0]);
    await at(1000);
    expect(runs).toEqual([0, 1000]);

    // No more requests: periodic runs 10 s after the last run.
    await at(10_999);
    expect(runs).toEqual([0, 1000]);
    await at(11_000);
    expect(runs).toEqual([0, 1000, 11_000]);
    await at(21_000);
    expect(runs).toEqual([0, 1000, 11_000, 21_000]);

    abort.abort();
    await done;
  });

  it('runs periodically every maxInterval from the loop start when nobody asks', async () => {
    const { runs, abort, done } = start({ burstRuns: 1 });
    await at(9_999);
    expect(runs).toEqual([]);
    await at(30_000);
    expect(runs).toEqual([10_000, 20_000, 30_000]);
    abort.abort();
    await done;
  });

  it('coalesces many requests in one tick into one run', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 5 });
    runner.run();
    runner.run();
    runner.run();
    await at(0);
    expect(runs).toEqual([0]);
    abort.abort();
    await done;
  });

  it('serves a run() made before loop() when the loop starts', async () => {
    const { runner, runs, abort } = start({ burstRuns: 1 }, { loop: false });
    runner.run();
    await at(2000);
    expect(runs).toEqual([]);
    const done = runner.loop(abort.signal);
    await at(2000);
    expect(runs).toEqual([2000]);
    await at(12_000);
    expect(runs).toEqual([2000, 12_000]);
    abort.abort();
    await done;
  });

  it('does not call fn on the caller’s stack', () => {
    const { runner, runs, abort } = start({ burstRuns: 1 });
    runner.run();
    expect(runs).toEqual([]);
    abort.abort();
  });
});

describe('BoundedFrequencyRunner: bursts (min 1 s, max 10 s, burst 2)', () => {
  it('allows two back-to-back runs, then one per second as the bucket refills', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 2 });

    runner.run();
    await at(0);
    await at(100);
    runner.run(); // second token: runs at once
    await at(100);
    expect(runs).toEqual([0, 100]);

    await at(200);
    runner.run(); // bucket empty; the first token is back at 1 s
    await at(999);
    expect(runs).toEqual([0, 100]);
    await at(1000);
    expect(runs).toEqual([0, 100, 1000]);

    await at(1500);
    runner.run(); // next token at 2 s
    await at(1999);
    expect(runs).toEqual([0, 100, 1000]);
    await at(2000);
    expect(runs).toEqual([0, 100, 1000, 2000]);

    // After a quiet spell the bucket is full again: two at once, the third waits 1 s.
    await at(5000);
    runner.run();
    await at(5000);
    await at(5001);
    runner.run();
    await at(5001);
    await at(5002);
    runner.run();
    await at(5002);
    expect(runs).toEqual([0, 100, 1000, 2000, 5000, 5001]);
    await at(6000);
    expect(runs).toEqual([0, 100, 1000, 2000, 5000, 5001, 6000]);

    // The periodic run comes 10 s after the last run.
    await at(15_999);
    expect(runs).toHaveLength(7);
    await at(16_000);
    expect(runs.at(-1)).toBe(16_000);

    abort.abort();
    await done;
  });

  it('defers to when the bucket next holds a token (docs/differences.md)', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 2 });
    runner.run();
    await at(0);
    await at(500);
    runner.run();
    await at(600);
    runner.run();
    await at(600);
    expect(runs).toEqual([0, 500]);
    // Tokens: 2 → 1 at 0 s, 1.5 → 0.5 at 0.5 s, 1 at 1 s. (Go waits until 1.5 s: 1 s after the last run.)
    await at(1000);
    expect(runs).toEqual([0, 500, 1000]);
    abort.abort();
    await done;
  });

  it('serves every request at once when minInterval is 0', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 1, minIntervalMs: 0 });
    for (let i = 0; i < 5; i++) {
      await at(i);
      runner.run();
      await at(i);
    }
    expect(runs).toEqual([0, 1, 2, 3, 4]);
    abort.abort();
    await done;
  });
});

describe('BoundedFrequencyRunner: retryAfter', () => {
  it('runs at the retry time when no run comes first', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 1 });
    runner.retryAfter(3000);
    await at(2999);
    expect(runs).toEqual([]);
    await at(3000);
    expect(runs).toEqual([3000]);
    await at(13_000);
    expect(runs).toEqual([3000, 13_000]);
    abort.abort();
    await done;
  });

  it('keeps the earliest of several retries', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 1 });
    runner.retryAfter(5000);
    runner.retryAfter(2000);
    runner.retryAfter(4000);
    await at(10_000);
    expect(runs).toEqual([2000]);
    abort.abort();
    await done;
  });

  it('is cancelled by a normal run that happens before it', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 1 });
    runner.retryAfter(3000);
    await at(1000);
    runner.run();
    await at(1000);
    expect(runs).toEqual([1000]);
    await at(10_999);
    expect(runs).toEqual([1000]);
    await at(11_000);
    expect(runs).toEqual([1000, 11_000]);
    abort.abort();
    await done;
  });

  it('after a run, still respects the rate limit', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 1 });
    runner.run();
    await at(100);
    runner.retryAfter(500); // due at 600, but no token before 1000
    await at(999);
    expect(runs).toEqual([0]);
    await at(1000);
    expect(runs).toEqual([0, 1000]);
    runner.retryAfter(2000);
    await at(2999);
    expect(runs).toEqual([0, 1000]);
    await at(3000);
    expect(runs).toEqual([0, 1000, 3000]);
    abort.abort();
    await done;
  });

  it('made before loop() is applied when the loop starts, the earliest winning', async () => {
    const { runner, runs, abort } = start({ burstRuns: 1 }, { loop: false });
    runner.retryAfter(5000);
    runner.retryAfter(2000);
    runner.retryAfter(4000);
    await at(500);
    const done = runner.loop(abort.signal);
    await at(1999);
    expect(runs).toEqual([]);
    await at(2000);
    expect(runs).toEqual([2000]);
    abort.abort();
    await done;
  });

  it('ignores NaN with a warning and treats a negative delay as now', async () => {
    const logger = recordingLogger();
    const { runner, runs, abort, done } = start({ burstRuns: 1, logger });
    runner.retryAfter(Number.NaN);
    expect(logger.calls.warn).toHaveLength(1);
    await at(500);
    expect(runs).toEqual([]);
    runner.retryAfter(-100);
    await at(500);
    expect(runs).toEqual([500]);
    abort.abort();
    await done;
  });
});

describe('BoundedFrequencyRunner: async runs', () => {
  /** A runner whose fn takes `durationMs` of fake time; records starts and the peak concurrency. */
  function slow(durationMs: number, opts: Partial<BoundedFrequencyRunnerOptions> = {}) {
    const starts: number[] = [];
    const ends: number[] = [];
    let active = 0;
    let peak = 0;
    const runner = new BoundedFrequencyRunner({
      name: 'slow',
      minIntervalMs: 1000,
      maxIntervalMs: 10_000,
      burstRuns: 2,
      fn: async () => {
        starts.push(elapsed());
        active++;
        peak = Math.max(peak, active);
        await new Promise((resolve) => setTimeout(resolve, durationMs));
        active--;
        ends.push(elapsed());
      },
      ...opts,
    });
    const abort = new AbortController();
    const done = runner.loop(abort.signal);
    return { runner, starts, ends, abort, done, peak: () => peak };
  }

  it('never overlaps runs: requests during a run give one more run after it', async () => {
    const { runner, starts, ends, abort, done, peak } = slow(3000);
    runner.run();
    await at(500);
    runner.run();
    await at(600);
    runner.run();
    await at(2999);
    expect(starts).toEqual([0]);
    await at(3000);
    expect(starts).toEqual([0, 3000]);
    await at(6000);
    expect(ends).toEqual([3000, 6000]);
    // Coalesced into one: nothing more until the periodic run, 10 s after the last one ended.
    await at(15_999);
    expect(starts).toEqual([0, 3000]);
    await at(16_000);
    expect(starts).toEqual([0, 3000, 16_000]);
    expect(peak()).toBe(1);
    abort.abort();
    await at(19_000);
    await done;
  });

  it('keeps a retry asked for during a run', async () => {
    const { runner, starts, abort, done } = slow(3000, { burstRuns: 1 });
    runner.run();
    await at(1000);
    runner.retryAfter(6000);
    runner.retryAfter(4000); // due at 5000, after the run ends at 3000
    runner.retryAfter(5000);
    await at(4999);
    expect(starts).toEqual([0]);
    await at(5000);
    expect(starts).toEqual([0, 5000]);
    abort.abort();
    await at(8000);
    await done;
  });

  it('on abort during a run, waits for it to end, then starts nothing', async () => {
    const { runner, starts, ends, abort, done } = slow(3000);
    let resolved = false;
    void done.then(() => {
      resolved = true;
    });
    runner.run();
    await at(1000);
    runner.run();
    abort.abort();
    await at(2999);
    expect(resolved).toBe(false);
    await at(3000);
    expect(resolved).toBe(true);
    expect(ends).toEqual([3000]);
    expect(vi.getTimerCount()).toBe(0);
    await at(60_000);
    expect(starts).toEqual([0]);
  });
});

describe('BoundedFrequencyRunner: failures', () => {
  it('logs a throwing fn, keeps looping and retries after minInterval', async () => {
    const logger = recordingLogger();
    const runs: number[] = [];
    const runner = new BoundedFrequencyRunner({
      name: 'failing',
      minIntervalMs: 1000,
      maxIntervalMs: 10_000,
      burstRuns: 1,
      logger,
      fn: () => {
        runs.push(elapsed());
        if (runs.length <= 2) throw new Error('boom');
      },
    });
    const abort = new AbortController();
    const done = runner.loop(abort.signal);
    runner.run();
    await at(0);
    expect(runs).toEqual([0]);
    expect(logger.calls.error).toHaveLength(1);
    expect(logger.calls.error?.[0]?.[1]).toBeInstanceOf(Error);
    await at(1000);
    expect(runs).toEqual([0, 1000]);
    await at(2000);
    expect(runs).toEqual([0, 1000, 2000]);
    expect(logger.calls.error).toHaveLength(2);
    // Success: back to the periodic schedule.
    await at(11_999);
    expect(runs).toHaveLength(3);
    await at(12_000);
    expect(runs).toEqual([0, 1000, 2000, 12_000]);
    abort.abort();
    await done;
  });

  it('logs a rejecting fn and retries after errorRetryMs (1 s by default when min is 0)', async () => {
    const logger = recordingLogger();
    const runs: number[] = [];
    const runner = new BoundedFrequencyRunner({
      name: 'rejecting',
      minIntervalMs: 0,
      maxIntervalMs: 10_000,
      burstRuns: 1,
      logger,
      fn: async () => {
        runs.push(elapsed());
        throw new Error('nope');
      },
    });
    const abort = new AbortController();
    const done = runner.loop(abort.signal);
    runner.run();
    await at(2500);
    expect(runs).toEqual([0, 1000, 2000]);
    expect(logger.calls.error).toHaveLength(3);
    abort.abort();
    await done;
  });
});

describe('BoundedFrequencyRunner: loop lifecycle', () => {
  it('stops everything on abort: no timer left, no more runs, run() is only remembered', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 1 });
    runner.run();
    await at(500);
    runner.run(); // deferred to 1000
    runner.retryAfter(700);
    abort.abort();
    await done;
    expect(vi.getTimerCount()).toBe(0);
    runner.run();
    await at(60_000);
    expect(runs).toEqual([0]);
  });

  it('resolves at once for an already aborted signal', async () => {
    const { runner, runs } = start({ burstRuns: 1 }, { loop: false });
    await runner.loop(AbortSignal.abort());
    runner.run();
    await at(20_000);
    expect(runs).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('refuses a second concurrent loop, and may loop again after the first ended', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 1 });
    await expect(runner.loop(new AbortController().signal)).rejects.toThrow(InvalidOptionError);
    abort.abort();
    await done;
    const again = new AbortController();
    const second = runner.loop(again.signal);
    runner.run();
    await at(0);
    expect(runs).toEqual([0]);
    again.abort();
    await second;
  });

  it('serves a run() that fn makes itself once the rate limit allows', async () => {
    let count = 0;
    const runs: number[] = [];
    const runner = new BoundedFrequencyRunner({
      name: 'self',
      minIntervalMs: 1000,
      maxIntervalMs: 10_000,
      burstRuns: 1,
      fn: () => {
        runs.push(elapsed());
        if (++count === 1) runner.run();
      },
    });
    const abort = new AbortController();
    const done = runner.loop(abort.signal);
    runner.run();
    await at(1000);
    expect(runs).toEqual([0, 1000]);
    abort.abort();
    await done;
  });

  it('handles a maxInterval longer than setTimeout allows', async () => {
    const max = 3 * 2 ** 31;
    const { runner, runs, abort, done } = start({ burstRuns: 1, maxIntervalMs: max });
    runner.run();
    await at(max - 1);
    expect(runs).toEqual([0]);
    await at(max);
    expect(runs).toEqual([0, max]);
    abort.abort();
    await done;
  });

  it('runs only on request when maxInterval is Infinity', async () => {
    const { runner, runs, abort, done } = start({ burstRuns: 1, maxIntervalMs: Infinity });
    runner.run();
    await at(0);
    expect(vi.getTimerCount()).toBe(0);
    await at(100_000);
    expect(runs).toEqual([0]);
    abort.abort();
    await done;
  });

  it('uses an injected clock', async () => {
    let clock = 0;
    const runs: number[] = [];
    const runner = new BoundedFrequencyRunner({
      name: 'clock',
      minIntervalMs: 1000,
      maxIntervalMs: 10_000,
      burstRuns: 1,
      now: () => clock,
      fn: () => {
        runs.push(clock);
      },
    });
    const abort = new AbortController();
    const done = runner.loop(abort.signal);
    runner.run();
    await vi.advanceTimersByTimeAsync(0);
    clock = 5000; // the injected clock says a token is back, whatever the timers say
    runner.run();
    await vi.advanceTimersByTimeAsync(0);
    expect(runs).toEqual([0, 5000]);
    abort.abort();
    await done;
  });
});

describe('BoundedFrequencyRunner: options', () => {
  const base: BoundedFrequencyRunnerOptions = {
    name: 'opts',
    fn: () => {},
    minIntervalMs: 1000,
    maxIntervalMs: 10_000,
    burstRuns: 2,
  };
  const bad: [string, Partial<BoundedFrequencyRunnerOptions>][] = [
    ['max < min', { maxIntervalMs: 999 }],
    ['max 0', { minIntervalMs: 0, maxIntervalMs: 0 }],
    ['max NaN', { maxIntervalMs: Number.NaN }],
    ['min negative', { minIntervalMs: -1 }],
    ['min NaN', { minIntervalMs: Number.NaN }],
    ['min Infinity', { minIntervalMs: Infinity, maxIntervalMs: Infinity }],
    ['burst 0', { burstRuns: 0 }],
    ['burst 1.5', { burstRuns: 1.5 }],
    ['errorRetryMs 0', { errorRetryMs: 0 }],
    ['fn missing', { fn: undefined as unknown as () => void }],
  ];
  for (const [what, patch] of bad) {
    it(`refuses ${what} with InvalidOptionError`, () => {
      expect(() => new BoundedFrequencyRunner({ ...base, ...patch })).toThrow(InvalidOptionError);
    });
  }

  it('accepts min = max and min 0', () => {
    expect(() => new BoundedFrequencyRunner({ ...base, maxIntervalMs: 1000 })).not.toThrow();
    expect(() => new BoundedFrequencyRunner({ ...base, minIntervalMs: 0 })).not.toThrow();
  });
});
