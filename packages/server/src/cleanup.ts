import type { Logger, PortalManager } from '@userspace-proxy/core';
import { IptablesPortalManager } from '@userspace-proxy/linux';

/**
 * `--cleanup`: removes what the userspace (redirect) mode leaves on a host, its iptables chains
 * (KUBE-PORTALS-CONTAINER/HOST, KUBE-NODEPORT-CONTAINER/HOST/NON-LOCAL) and their jump rules, as
 * `kube-proxy --cleanup` did. Chains that are not there are fine; any other failure is reported
 * with kube-proxy's message and exit code 1.
 */

/** Runs the cleanup; resolves with the process exit code. */
export async function runCleanup(
  logger: Logger,
  makePortals: (logger: Logger) => PortalManager = (l) => new IptablesPortalManager({ logger: l }),
): Promise<number> {
  try {
    await makePortals(logger).cleanupLeftovers();
    logger.info('removed the rules of the userspace mode');
    return 0;
  } catch (err) {
    logger.error(`encountered an error while tearing down rules: ${(err as Error).message}`);
    return 1;
  }
}
