import { afterEach, describe, expect, it, vi } from 'vitest';
import { spyLogger } from '../../core/src/test-support/spy-logger.js';
import type { HelperChild } from './helper-process.js';
import { HELPER_RESTART_RESET_MS, HelperSupervisor } from './helper-supervisor.js';

afterEach(() => {
  vi.useRealTimers();
});

describe('HelperSupervisor', () => {
  it('keeps backing off while a helper that had stayed up fails to start again', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const logger = spyLogger();
    const helper = { isExited: false, stop: () => {} } as unknown as HelperChild;
    let starts = 0;
    const supervisor = new HelperSupervisor<HelperChild>({
      protocol: 'UDP',
      // The first start works; every later one fails (the binary went away, say).
      start: () =>
        starts++ === 0 ? Promise.resolve(helper) : Promise.reject(new Error('cannot run it')),
      restartBackoffMs: 100,
      counters: { helperStarts: 0 },
      wanted: () => true,
      relisten: async () => true,
      logger,
    });
    await supervisor.ensure(logger);
    // It stays up past the reset time, then dies: the back-off starts over, at 100 ms.
    await vi.advanceTimersByTimeAsync(HELPER_RESTART_RESET_MS + 1000);
    (helper as { isExited: boolean }).isExited = true;
    supervisor.exited();
    supervisor.scheduleRestart('it died');
    for (let i = 0; i < 4; i++) await vi.advanceTimersByTimeAsync(5000);
    const delays = logger.error.mock.calls
      .map((c) => /restarting it in (\d+) ms/.exec(String(c[0]))?.[1])
      .filter((d) => d !== undefined)
      .map(Number);
    // Each failed start doubles it, as it would for a helper that kept dying.
    expect(delays.slice(0, 4)).toEqual([100, 200, 400, 800]);
    await supervisor.close();
  });
});
