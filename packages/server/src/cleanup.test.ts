import { noopLogger, type PortalManager } from '@userspace-proxy/core';
import { CleanupError, type CommandResult, type CommandRunner } from '@userspace-proxy/linux';
import { describe, expect, it } from 'vitest';
import { runCleanup } from './cleanup.js';
import { createDaemonLogger } from './logging.js';

function portals(cleanup: () => Promise<void>): PortalManager {
  return { open: async () => {}, close: async () => {}, cleanupLeftovers: cleanup };
}

/** A fake iptables: `present` lists "table chain" pairs and "table jump-from→to" jump rules. */
function fakeIptables(present: Set<string>): { runner: CommandRunner; ran: string[] } {
  const ran: string[] = [];
  const missing: CommandResult = {
    code: 1,
    stdout: '',
    stderr: 'iptables: No chain/target/match by that name.',
  };
  return {
    ran,
    runner: {
      async run(cmd, args) {
        ran.push(`${cmd} ${args.join(' ')}`);
        const table = args[args.indexOf('-t') + 1];
        const op = args.find((a) => ['-D', '-F', '-X'].includes(a));
        const chain = args[args.indexOf(op ?? '') + 1];
        const target = args[args.indexOf('-j') + 1];
        const key = op === '-D' ? `${table} ${chain}→${target}` : `${table} ${chain}`;
        if (!present.has(key)) return missing;
        if (op !== '-F') present.delete(key);
        return { code: 0, stdout: '', stderr: '' };
      },
    },
  };
}

/** Captures the text log at `verbosity`. */
function capture(verbosity = 0) {
  const lines: string[] = [];
  const logger = createDaemonLogger({
    format: 'text',
    verbosity,
    colors: false,
    write: (l) => lines.push(l),
  });
  return { logger, lines };
}

describe('runCleanup', () => {
  it('exits 0 once the leftovers are removed', async () => {
    let called = 0;
    expect(await runCleanup(noopLogger, () => portals(async () => void called++))).toBe(0);
    expect(called).toBe(1);
  });

  it('says so when there was nothing to remove', async () => {
    const { logger, lines } = capture();
    const { runner } = fakeIptables(new Set());
    expect(await runCleanup(logger, undefined, runner)).toBe(0);
    expect(lines.join('\n')).toContain(
      'nothing to remove: no iptables chains or jump rules of the userspace mode were found',
    );
    expect(lines.join('\n')).not.toMatch(/removed leftover|removed \d/);
  });

  it('says what it removed, and shows every command at -v 3', async () => {
    const { logger, lines } = capture(3);
    const { runner } = fakeIptables(
      new Set(['nat PREROUTING→KUBE-PORTALS-CONTAINER', 'nat KUBE-PORTALS-CONTAINER']),
    );
    expect(await runCleanup(logger, undefined, runner)).toBe(0);
    const text = lines.join('\n');
    expect(text).toContain(
      'removed 1 jump rule(s) and 1 chain(s) (iptables nat KUBE-PORTALS-CONTAINER) of the userspace mode',
    );
    expect(text).toMatch(/TRACE.*running iptables -w 5 -t nat -D PREROUTING/);
    expect(text).toMatch(/TRACE.*iptables -w 5 -t nat -X KUBE-PORTALS-CONTAINER exited 0/);
    expect(text).not.toMatch(/INFO.*removed leftover iptables chains/); // core's line, at debug
  });

  it('does not show the commands at -v 2', async () => {
    const { logger, lines } = capture(2);
    const { runner } = fakeIptables(new Set());
    await runCleanup(logger, undefined, runner);
    expect(lines.join('\n')).not.toContain('running iptables');
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
