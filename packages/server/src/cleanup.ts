import type { Logger, PortalManager } from '@userspace-proxy/core';
import {
  type CommandResult,
  type CommandRunner,
  IptablesPortalManager,
} from '@userspace-proxy/linux';
import { LoggingCommandRunner } from './command-log.js';

/**
 * `--cleanup`: removes what the userspace (redirect) mode leaves on a host, its iptables chains
 * (KUBE-PORTALS-CONTAINER/HOST, KUBE-NODEPORT-CONTAINER/HOST/NON-LOCAL) and their jump rules, as
 * `kube-proxy --cleanup` did, and says what it removed: every successful `-D` (a jump rule) and `-X`
 * (a chain) is counted as it runs, so "nothing was there" is said as such. Chains that are not there
 * are fine; any other failure is reported with kube-proxy's message and exit code 1.
 */

/** What one cleanup removed. */
export interface CleanupSummary {
  jumpRules: number;
  /** "iptables nat KUBE-PORTALS-HOST", in order of removal. */
  chains: string[];
}

/** Counts the removals among command results (`iptables -w 5 -t nat -X KUBE-…`). */
export function cleanupRecorder(): {
  summary: CleanupSummary;
  observe: (cmd: string, args: readonly string[], result: CommandResult) => void;
} {
  const summary: CleanupSummary = { jumpRules: 0, chains: [] };
  return {
    summary,
    observe(cmd, args, result) {
      if (result.code !== 0) return;
      const table = args[args.indexOf('-t') + 1] ?? 'filter';
      if (args.includes('-D')) summary.jumpRules++;
      const x = args.indexOf('-X');
      if (x >= 0) summary.chains.push(`${cmd} ${table} ${args[x + 1] ?? ''}`);
    },
  };
}

/** The sentence `--cleanup` ends with. */
export function describeCleanup(summary: CleanupSummary): string {
  if (summary.jumpRules === 0 && summary.chains.length === 0) {
    return 'nothing to remove: no iptables chains or jump rules of the userspace mode were found';
  }
  const chains =
    summary.chains.length === 0
      ? 'no chains'
      : `${summary.chains.length} chain(s) (${summary.chains.join(', ')})`;
  return `removed ${summary.jumpRules} jump rule(s) and ${chains} of the userspace mode`;
}

/**
 * Core's portal manager ends a cleanup with "removed leftover iptables chains and jump rules"
 * whatever it found; the summary here says what really happened, so its info lines are shown at
 * debug level (its warnings and errors unchanged).
 */
function demoteInfo(logger: Logger): Logger {
  return {
    ...logger,
    silly: (...a) => logger.silly(...a),
    trace: (...a) => logger.trace(...a),
    debug: (...a) => logger.debug(...a),
    info: (...a) => logger.debug(...a),
    warn: (...a) => logger.warn(...a),
    error: (...a) => logger.error(...a),
    fatal: (...a) => logger.fatal(...a),
    getSubLogger: (settings) => demoteInfo(logger.getSubLogger(settings)),
  };
}

/** Runs the cleanup; resolves with the process exit code. */
export async function runCleanup(
  logger: Logger,
  makePortals: (logger: Logger, runner: CommandRunner) => PortalManager = (l, runner) =>
    new IptablesPortalManager({ logger: demoteInfo(l), runner }),
  inner?: CommandRunner,
): Promise<number> {
  const recorder = cleanupRecorder();
  const runner = new LoggingCommandRunner({
    logger,
    observe: recorder.observe,
    ...(inner ? { inner } : {}),
  });
  try {
    await makePortals(logger, runner).cleanupLeftovers();
    logger.info(describeCleanup(recorder.summary));
    return 0;
  } catch (err) {
    logger.error(`encountered an error while tearing down rules: ${(err as Error).message}`);
    return 1;
  }
}
