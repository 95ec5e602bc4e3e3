import { noopLogger, type PortalManager } from '@userspace-proxy/core';
import { CleanupError } from '@userspace-proxy/linux';
import { describe, expect, it } from 'vitest';
import { runCleanup } from './cleanup.js';

function portals(cleanup: () => Promise<void>): PortalManager {
  return { open: async () => {}, close: async () => {}, cleanupLeftovers: cleanup };
}

describe('runCleanup', () => {
  it('exits 0 once the leftovers are removed', async () => {
    let called = 0;
    expect(await runCleanup(noopLogger, () => portals(async () => void called++))).toBe(0);
    expect(called).toBe(1);
  });

  it('exits 1 with kube-proxy’s message when tearing down fails', async () => {
    const lines: string[] = [];
    const logger = { ...noopLogger, error: (line: unknown) => void lines.push(String(line)) };
    const code = await runCleanup(logger, () =>
      portals(async () => {
        throw new CleanupError('iptables chains');
      }),
    );
    expect(code).toBe(1);
    expect(lines).toEqual([
      'encountered an error while tearing down rules: failed to clean up iptables chains',
    ]);
  });
});
