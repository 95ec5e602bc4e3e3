/**
 * The public surface of @userspace-proxy/linux: the Linux implementations of core's hook contracts
 * (PortalManager, ConntrackCleaner, AddressManager) and the command runner they share. Core stays
 * platform-neutral; a Windows or service-port-portal user never installs this package.
 */

export { CleanupError, CommandError } from './errors.js';
export type { IpAddressManagerOptions } from './address-manager-ip.js';
export { IpAddressManager, parseIpAddrShow } from './address-manager-ip.js';
export type {
  CommandResult,
  CommandRunner,
  ExecCommandRunnerOptions,
} from './command-runner.js';
export {
  COMMAND_NOT_FOUND_CODE,
  DEFAULT_COMMAND_RUNNER_OPTIONS,
  ExecCommandRunner,
  formatCommand,
  isCommandNotFound,
  prefixedCommandRunner,
} from './command-runner.js';
export type { ExecConntrackCleanerOptions } from './conntrack-exec.js';
export { ExecConntrackCleaner } from './conntrack-exec.js';
export type {
  IptablesRule,
  IptablesTable,
  JumpRule,
  PortalRuleOptions,
} from './iptables-rules.js';
export { IPTABLES_CHAINS, JUMP_RULES, portalRules } from './iptables-rules.js';
export type { IptablesPortalManagerOptions } from './portal-manager-iptables.js';
export { DEFAULT_IPTABLES_OPTIONS, IptablesPortalManager } from './portal-manager-iptables.js';
