import { ProxyError } from '@userspace-proxy/core';

/**
 * The errors of the Linux hooks, with stable `code`s like every ProxyError: they come from external
 * commands (iptables, conntrack, ip), which nothing platform-neutral runs.
 */

/** An external command (iptables, conntrack, ip) failed. `output` is what it printed. */
export class CommandError extends ProxyError {
  /** stdout and stderr of the command, for callers that recognise messages ("not found"). */
  readonly output: string;
  constructor(command: string, output: string, options?: { cause?: unknown }) {
    super('ERR_COMMAND', `${command} failed: ${output.trim() || 'no output'}`, options);
    this.output = output;
  }
}

/**
 * Removing what a previous run left (iptables chains and jump rules) failed for a reason other than
 * "not there". `cause` holds each failure; whatever could be removed was removed.
 */
export class CleanupError extends ProxyError {
  constructor(what: string, options?: { cause?: unknown }) {
    const reason = options?.cause instanceof Error ? `: ${options.cause.message}` : '';
    super('ERR_CLEANUP', `failed to clean up ${what}${reason}`, options);
  }
}
