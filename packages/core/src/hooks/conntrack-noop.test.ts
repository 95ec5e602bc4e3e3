import { describe, expect, it } from 'vitest';
import { NoopConntrackCleaner } from './conntrack-noop.js';

describe('NoopConntrackCleaner', () => {
  it('clears nothing and never fails', async () => {
    await expect(new NoopConntrackCleaner().clearEntriesForIP('10.0.0.1', 'UDP')).resolves.toBe(
      undefined,
    );
  });
});
