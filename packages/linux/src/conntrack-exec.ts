import { isIP } from 'node:net';
import type { ConntrackCleaner, Protocol } from '@userspace-proxy/core';
import {
  ConntrackError,
  componentLogger,
  InvalidOptionError,
  type Logger,
} from '@userspace-proxy/core';
import {
  type CommandRunner,
  commandOutput,
  ExecCommandRunner,
  formatCommand,
  isCommandNotFound,
} from './command-runner.js';
import { CommandError } from './errors.js';

/** Options of {@link ExecConntrackCleaner}. */
export interface ExecConntrackCleanerOptions {
  /** Runs `conntrack`. Default: an {@link ExecCommandRunner}. */
  runner?: CommandRunner;
  /** tslog-compatible; default silent. */
  logger?: Logger;
  /** The program. Default "conntrack" (from conntrack-tools), found on PATH. */
  conntrackCommand?: string;
}

/** What conntrack prints, and exits 1 with, when there was nothing to delete ("10 flow…" is not it). */
const NOTHING_DELETED = /(?:^|[^0-9])0 flow entries have been deleted/;

const PROTOCOLS: ReadonlySet<string> = new Set(['TCP', 'UDP', 'SCTP']);

/**
 * Deletes kernel connection-tracking entries whose original destination is a Service address, by
 * running `conntrack -D --orig-dst IP -p udp` (with `-f ipv6` for IPv6). Without it, a UDP client of
 * a removed Service keeps a NAT mapping to a proxy port that may now belong to another Service.
 * Needs root (CAP_NET_ADMIN) and the conntrack tool.
 */
export class ExecConntrackCleaner implements ConntrackCleaner {
  readonly #runner: CommandRunner;
  readonly #log: Logger;
  readonly #command: string;

  constructor(options: ExecConntrackCleanerOptions = {}) {
    this.#runner = options.runner ?? new ExecCommandRunner();
    this.#log = componentLogger(options.logger, 'conntrack');
    this.#command = options.conntrackCommand ?? 'conntrack';
  }

  async clearEntriesForIP(ip: string, protocol: Protocol): Promise<void> {
    const family = typeof ip === 'string' ? isIP(ip) : 0;
    if (family === 0) {
      throw new ConntrackError(String(ip), {
        cause: new InvalidOptionError('ip', `"${String(ip)}" is not an IP address`),
      });
    }
    if (!PROTOCOLS.has(protocol)) {
      throw new ConntrackError(ip, {
        cause: new InvalidOptionError('protocol', `unsupported protocol "${String(protocol)}"`),
      });
    }
    const args = ['-D', '--orig-dst', ip, '-p', protocol.toLowerCase()];
    if (family === 6) args.push('-f', 'ipv6');
    const cmdline = formatCommand(this.#command, args);
    this.#log.trace(`clearing conntrack entries: ${cmdline}`);
    let result: Awaited<ReturnType<CommandRunner['run']>>;
    try {
      result = await this.#runner.run(this.#command, args);
    } catch (error) {
      if ((error as NodeJS.ErrnoException)?.code === 'ENOENT') throw this.#missing(ip, error);
      throw new ConntrackError(ip, { cause: error });
    }
    const output = commandOutput(result);
    if (result.code === 0 || NOTHING_DELETED.test(output)) {
      this.#log.trace(`conntrack entries for ${ip} cleared: ${output}`);
      return;
    }
    if (isCommandNotFound(result)) {
      throw this.#missing(ip, new CommandError(cmdline, output));
    }
    throw new ConntrackError(ip, {
      cause: new CommandError(cmdline, `exit ${result.code}: ${output}`),
    });
  }

  #missing(ip: string, cause: unknown): ConntrackError {
    return new ConntrackError(ip, {
      cause,
      hint: `the ${this.#command} program was not found; install conntrack (Debian/Ubuntu: apt-get install conntrack)`,
    });
  }
}
