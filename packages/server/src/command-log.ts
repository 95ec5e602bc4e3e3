import { componentLogger, type Logger } from '@userspace-proxy/core';
import {
  type CommandResult,
  type CommandRunner,
  ExecCommandRunner,
  formatCommand,
} from '@userspace-proxy/linux';
import { logSafe } from './log-safe.js';

/**
 * The external commands the daemon runs (iptables in the userspace mode and for `--cleanup`), logged
 * at trace level, which `-v 3` and up shows (docs/operations.md, Logging): the command line, its exit
 * code and what it printed, bounded. Core's iptables code runs them through a CommandRunner without
 * logging them; wrapping the runner here makes them visible without changing it. `observe` sees
 * every result, which is how `--cleanup` knows what it removed.
 */

/** How much of a command's output is logged. */
export const COMMAND_OUTPUT_LOG_CHARS = 500;

/** Options of {@link LoggingCommandRunner}. */
export interface LoggingCommandRunnerOptions {
  logger: Logger;
  /** Default core's ExecCommandRunner. */
  inner?: CommandRunner;
  /** Told about every command that ran, with its result. */
  observe?: (cmd: string, args: readonly string[], result: CommandResult) => void;
}

/** A {@link CommandRunner} that logs every command at trace level. */
export class LoggingCommandRunner implements CommandRunner {
  readonly #inner: CommandRunner;
  readonly #log: Logger;
  readonly #observe: LoggingCommandRunnerOptions['observe'];

  constructor(options: LoggingCommandRunnerOptions) {
    this.#inner = options.inner ?? new ExecCommandRunner();
    this.#log = componentLogger(options.logger, 'commands');
    this.#observe = options.observe;
  }

  async run(cmd: string, args: readonly string[]): Promise<CommandResult> {
    const line = logSafe(formatCommand(cmd, args), 1000);
    this.#log.trace(`running ${line}`);
    let result: CommandResult;
    try {
      result = await this.#inner.run(cmd, args);
    } catch (err) {
      this.#log.trace(`${line} could not run: ${(err as Error).message}`);
      throw err;
    }
    const output = `${result.stdout}${result.stderr}`.trim();
    const shown = output === '' ? '' : `: ${logSafe(output, COMMAND_OUTPUT_LOG_CHARS)}`;
    this.#log.trace(`${line} exited ${result.code}${shown}`);
    this.#observe?.(cmd, args, result);
    return result;
  }
}
