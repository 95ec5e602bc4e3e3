import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import type { Logger } from '@userspace-proxy/core';
import { runCleanup } from './cleanup.js';
import { type CliOptions, parseCommandLine } from './cli.js';
import { type ResolvedConfiguration, resolveConfiguration } from './config-load.js';
import type { KubeProxyConfiguration } from './config-schema.js';
import { configurationYaml } from './config-write.js';
import { Daemon, type DaemonOptions } from './daemon.js';
import { watchFile } from './file-watch.js';
import { LOG_MESSAGE_MAX_CHARS, logSafe } from './log-safe.js';
import { createDaemonLogger } from './logging.js';
import { chooseSource } from './sources.js';
import { runStatusCommand } from './status-cli.js';
import { primaryDaemonOptions } from './workers/primary.js';
import { resolveWorkerCount } from './workers/worker-count.js';

const mustExist = <T>(value: T | undefined): T => {
  if (value === undefined) throw new Error('used before it was made');
  return value;
};

/**
 * The command: flags and file to a configuration, then `--write-config-to`, `--cleanup` or the
 * daemon until a signal. It returns the exit code instead of exiting, and takes its process
 * surroundings (output, signals, environment) as arguments, so the whole command runs in tests.
 */

/** The process surroundings of {@link runCommand}. */
export interface CommandIO {
  stdout(text: string): void;
  stderr(text: string): void;
  env: Record<string, string | undefined>;
  /** Registers a handler for SIGTERM and SIGINT; returns the function that removes it. */
  onSignal(handler: (signal: string) => void): () => void;
  /** Where log lines go; default stderr. */
  log?: (line: string) => void;
  /** Extra daemon options (fakes in tests). */
  daemon?: Partial<DaemonOptions>;
  /** The parent process id, read again on each check (`--exit-with-parent`). Default process.ppid. */
  parentPid?: () => number;
  /** How often `--exit-with-parent` checks. Default {@link PARENT_CHECK_MS}. */
  parentCheckMs?: number;
}

/** How often `--exit-with-parent` looks at the parent process. */
export const PARENT_CHECK_MS = 1000;

/** The real process. */
export const processIO: CommandIO = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  env: process.env,
  onSignal(handler) {
    const listener = (signal: NodeJS.Signals) => handler(signal);
    process.on('SIGTERM', listener);
    process.on('SIGINT', listener);
    // Never removed: without a listener Node restores the default action, and a late second signal
    // (a supervisor repeating SIGTERM, a wrapper forwarding Ctrl-C) would kill the process while
    // it exits, turning a clean exit 0 into death by signal. main.ts exits right after anyway.
    return () => {};
  },
};

/** A message about the configuration, which quotes the file's values: bounded and escaped. */
const safe = (message: string) => logSafe(message, LOG_MESSAGE_MAX_CHARS);

/**
 * How many of a configuration's errors (or warnings) are printed; the rest are only counted. A file
 * with 10 000 bad list entries must not print 10 000 lines (or one line of megabytes).
 */
export const CONFIG_MESSAGES_SHOWN = 5;

/** The first {@link CONFIG_MESSAGES_SHOWN} of `messages`, each made safe, then "… and N more". */
function shown(messages: readonly string[]): string[] {
  const head = messages.slice(0, CONFIG_MESSAGES_SHOWN).map(safe);
  const rest = messages.length - head.length;
  return rest > 0 ? [...head, `… and ${rest} more`] : head;
}

function resolve(cli: CliOptions): Promise<ResolvedConfiguration> {
  return resolveConfiguration({
    configFile: cli.configFile,
    flags: cli.flags,
    explicit: cli.explicit,
    configFlags: cli.configFlags,
  });
}

/** Runs the command line `argv` (without node and the script); resolves with the exit code. */
export async function runCommand(
  argv: readonly string[],
  io: CommandIO = processIO,
): Promise<number> {
  if (argv[0] === 'status') return runStatusCommand(argv.slice(1), io);
  const parsed = parseCommandLine(argv);
  if (parsed.kind === 'exit') {
    io.stdout(parsed.stdout);
    io.stderr(parsed.stderr);
    return parsed.code;
  }
  const cli = parsed.options;
  const resolved = await resolve(cli);
  const errors = [...resolved.errors];
  const config = resolved.config;
  if (config !== undefined && !cli.cleanup && cli.writeConfigTo === '') {
    const choice = chooseSource({
      servicesFile: config.userspaceProxy.servicesFile,
      kubeconfig: config.clientConnection.kubeconfig,
      master: cli.master,
      env: io.env,
    });
    if (choice.kind === 'none') errors.push(choice.error);
  }
  for (const warning of shown(resolved.warnings)) io.stderr(`Warning: ${warning}\n`);
  if (config === undefined || errors.length > 0) {
    io.stderr(
      `failed validate:\n${shown(errors)
        .map((e) => `  ${e}\n`)
        .join('')}`,
    );
    return 1;
  }
  const logger = createDaemonLogger({
    format: config.logging.format,
    verbosity: config.logging.verbosity,
    ...(io.log ? { write: io.log } : {}),
  });
  for (const flag of cli.explicit) logger.debug(`FLAG: --${flag}`);
  if (cli.writeConfigTo !== '') return writeConfig(cli.writeConfigTo, config, logger);
  if (cli.cleanup) return runCleanup(logger);
  return runDaemon(cli, config, logger, io);
}

async function writeConfig(
  path: string,
  config: KubeProxyConfiguration,
  logger: Logger,
): Promise<number> {
  try {
    await writeFile(path, configurationYaml(config, { writtenTo: path }));
    logger.info(`wrote the configuration to ${path}`);
    return 0;
  } catch (err) {
    logger.error(`cannot write the configuration to ${path}: ${(err as Error).message}`);
    return 1;
  }
}

async function runDaemon(
  cli: CliOptions,
  config: KubeProxyConfiguration,
  logger: Logger,
  io: CommandIO,
): Promise<number> {
  const workers = resolveWorkerCount(config);
  if (workers.reason !== undefined) logger.warn(workers.reason);
  let daemon: Daemon | undefined;
  const extra =
    workers.count > 1
      ? primaryDaemonOptions(config, logger, workers.count, () => mustExist(daemon), io.daemon)
      : io.daemon;
  daemon = new Daemon({ config, logger, master: cli.master, env: io.env, ...extra });
  const removeSignals = io.onSignal((signal) => void daemon.stop(signal));
  const stopWatching = new AbortController();
  try {
    await daemon.start();
  } catch (err) {
    logger.fatal(`cannot start: ${(err as Error).message}`);
    await daemon.stop('start failed', { exitCode: 1, drain: false });
  }
  if (cli.configFile !== '') {
    const reported = { errors: '' };
    void watchFile(
      {
        path: cli.configFile,
        logger,
        onChange: () => void checkConfigChange(cli, config, daemon, logger, reported),
      },
      stopWatching.signal,
    );
  }
  const stopParentWatch = cli.exitWithParent ? watchParent(daemon, logger, io) : () => {};
  const code = await daemon.exited;
  stopParentWatch();
  stopWatching.abort();
  removeSignals();
  return code;
}

/**
 * `--exit-with-parent`: when the parent dies the kernel gives the daemon a new parent (init or a
 * subreaper), so a changed parent pid means the process that started it is gone, whatever killed
 * it (SIGKILL leaves it no chance to pass a signal on). Returns the remover.
 */
function watchParent(daemon: Daemon, logger: Logger, io: CommandIO): () => void {
  const parentPid = io.parentPid ?? (() => process.ppid);
  const parent = parentPid();
  const timer = setInterval(() => {
    if (parentPid() === parent) return;
    clearInterval(timer);
    logger.warn(`the parent process (pid ${parent}) exited; stopping (--exit-with-parent)`);
    void daemon.stop('parent exited');
  }, io.parentCheckMs ?? PARENT_CHECK_MS);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * A changed configuration file: an invalid one is logged and ignored (a restart would fail); a valid
 * different one stops the daemon, draining like SIGTERM, with exit code 1 so that a supervisor
 * (Kubernetes, systemd Restart=on-failure) starts it again with the new file, as kube-proxy does.
 */
async function checkConfigChange(
  cli: CliOptions,
  current: KubeProxyConfiguration,
  daemon: Daemon,
  logger: Logger,
  reported: { errors: string },
): Promise<void> {
  const next = await resolve(cli);
  if (next.config === undefined || next.errors.length > 0) {
    // Any change in the directory calls this: the same mistakes are reported once. Compared in
    // full (as a digest), not as printed: two edits may differ only past what is shown.
    const digest = createHash('sha256').update(JSON.stringify(next.errors)).digest('hex');
    if (digest !== reported.errors) {
      reported.errors = digest;
      const errors = shown(next.errors).join('; ');
      logger.error(`the edited configuration file is invalid and is ignored: ${errors}`);
    }
    return;
  }
  reported.errors = '';
  if (JSON.stringify(next.config) === JSON.stringify(current)) return;
  logger.warn(
    "content of the proxy server's configuration file was updated; restarting to apply it",
  );
  await daemon.stop('configuration file changed', { exitCode: 1 });
}
