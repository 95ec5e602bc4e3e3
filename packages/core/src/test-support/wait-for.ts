import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Polls `condition` until it returns a truthy value (or a promise of one) and resolves with that
 * value; rejects once `deadlineMs` has passed. Tests with real sockets use it instead of fixed
 * sleeps, so they wait exactly as long as a loaded machine needs and no longer. It sleeps through
 * `node:timers/promises`, which vitest's fake timers leave alone, so it also works while they are
 * installed.
 */
export async function waitFor<T>(
  condition: () => T | Promise<T>,
  deadlineMs = 5_000,
  description = 'condition',
  intervalMs = 5,
): Promise<NonNullable<T>> {
  const start = performance.now();
  let lastError: unknown;
  for (;;) {
    try {
      const value = await condition();
      if (value) return value as NonNullable<T>;
    } catch (error) {
      lastError = error;
    }
    if (performance.now() - start > deadlineMs) {
      const cause = lastError === undefined ? '' : ` (last error: ${String(lastError)})`;
      throw new Error(`waitFor: ${description} not met within ${deadlineMs} ms${cause}`);
    }
    await sleep(intervalMs);
  }
}
