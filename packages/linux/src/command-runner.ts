import { execFile } from 'node:child_process';
import { CommandError } from './errors.js';

/** What one command printed and how it exited. */
export interface CommandResult {
  /** The exit code; {@link COMMAND_NOT_FOUND_CODE} when the program could not be found. */
  code: number;
  /** What it printed on stdout. */
  stdout: string;
  /** What it printed on stderr (the "command not found" message for a missing program). */
  stderr: string;
}

/**
 * Runs one external program (iptables, conntrack, ip). It is an interface so that tests and
 * integrators can record, fake or redirect commands (into a network namespace, over ssh, through
 * sudo) without the kernel-facing code knowing. A non-zero exit is a result, not a rejection: only
 * the caller knows whether "exit 1" means "not found" (iptables -C) or a real failure.
 */
export interface CommandRunner {
  /** Resolves with the exit code and output; rejects with CommandError when it could not run. */
  run(cmd: string, args: readonly string[]): Promise<CommandResult>;
}

/** The shell's code for "command not found", which {@link ExecCommandRunner} reports for ENOENT. */
export const COMMAND_NOT_FOUND_CODE = 127;

/** The defaults of {@link ExecCommandRunner}. */
export const DEFAULT_COMMAND_RUNNER_OPTIONS = {
  /** A hung iptables (xtables lock, broken netlink) must not stall syncs forever. */
  timeoutMs: 30_000,
  /** iptables-save on a busy host prints megabytes; more than this is refused, not buffered. */
  maxBufferBytes: 16 * 1024 * 1024,
} as const;

/** Options of {@link ExecCommandRunner}. */
export interface ExecCommandRunnerOptions {
  /** Kill the command (SIGKILL) after this long. Default 30 000. */
  timeoutMs?: number;
  /** The most stdout or stderr kept per command. Default 16 MiB. */
  maxBufferBytes?: number;
  /** The environment of the commands. Default: this process's, with LC_ALL=C for stable messages. */
  env?: NodeJS.ProcessEnv;
  /** Injected for tests: node:child_process `execFile`. */
  execFile?: typeof execFile;
}

/** "cmd arg1 arg2", for messages and logs. Arguments with spaces are quoted. */
export function formatCommand(cmd: string, args: readonly string[]): string {
  return [cmd, ...args]
    .map((a) => (a === '' || /[\s"']/.test(a) ? JSON.stringify(a) : a))
    .join(' ');
}

/**
 * The default runner: node:child_process `execFile`, no shell (so no argument is ever interpreted),
 * with a timeout and a bounded buffer. A missing program resolves with code 127 and a "command not
 * found" message, as a shell would say it, so that callers can tell the user what to install.
 */
export class ExecCommandRunner implements CommandRunner {
  readonly #timeoutMs: number;
  readonly #maxBuffer: number;
  readonly #env: NodeJS.ProcessEnv;
  readonly #execFile: typeof execFile;

  constructor(options: ExecCommandRunnerOptions = {}) {
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_COMMAND_RUNNER_OPTIONS.timeoutMs;
    this.#maxBuffer = options.maxBufferBytes ?? DEFAULT_COMMAND_RUNNER_OPTIONS.maxBufferBytes;
    this.#env = options.env ?? { ...process.env, LC_ALL: 'C' };
    this.#execFile = options.execFile ?? execFile;
  }

  run(cmd: string, args: readonly string[]): Promise<CommandResult> {
    return new Promise((resolve, reject) => {
      this.#execFile(
        cmd,
        [...args],
        {
          timeout: this.#timeoutMs,
          killSignal: 'SIGKILL',
          maxBuffer: this.#maxBuffer,
          env: this.#env,
          encoding: 'utf8',
          windowsHide: true,
        },
        (error, stdout, stderr) => {
          const out = String(stdout ?? '');
          const err = String(stderr ?? '');
          if (!error) {
            resolve({ code: 0, stdout: out, stderr: err });
            return;
          }
          const e = error as NodeJS.ErrnoException & { killed?: boolean; code?: unknown };
          if (e.code === 'ENOENT') {
            resolve({
              code: COMMAND_NOT_FOUND_CODE,
              stdout: out,
              stderr: `${cmd}: command not found`,
            });
            return;
          }
          if (typeof e.code === 'number' && !e.killed) {
            resolve({ code: e.code, stdout: out, stderr: err });
            return;
          }
          const why =
            e.code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER'
              ? `printed more than ${this.#maxBuffer} bytes`
              : e.killed
                ? `timed out after ${this.#timeoutMs} ms`
                : (e.message ?? 'could not be run');
          reject(new CommandError(formatCommand(cmd, args), `${why}\n${out}${err}`, { cause: e }));
        },
      );
    });
  }
}

/**
 * A runner that puts `prefix` before every command: `['ip', 'netns', 'exec', 'ns1']` runs everything
 * in a network namespace, `['sudo', '-n']` through sudo. The prefix's first word becomes the program.
 */
export function prefixedCommandRunner(
  prefix: readonly string[],
  runner: CommandRunner = new ExecCommandRunner(),
): CommandRunner {
  const [head, ...rest] = prefix;
  if (head === undefined) return runner;
  return { run: (cmd, args) => runner.run(head, [...rest, cmd, ...args]) };
}

/**
 * True when the result says the program does not exist: code 127 from {@link ExecCommandRunner} or
 * a shell, or the message `ip netns exec` prints when it cannot exec the program.
 */
export function isCommandNotFound(result: CommandResult): boolean {
  if (result.code === COMMAND_NOT_FOUND_CODE) return true;
  return /exec of ".*" failed: No such file or directory/.test(result.stderr);
}

/** stdout and stderr together, for error messages. */
export function commandOutput(result: CommandResult): string {
  return `${result.stdout}${result.stdout && result.stderr ? '\n' : ''}${result.stderr}`.trim();
}
