import { Command, CommanderError, Option } from 'commander';
import { FLAGS, FlagValueError, type Parser, parseBool } from './cli-flags.js';
import type { ConfigInput } from './config-schema.js';
import { VERSION } from './version.js';

/**
 * The command line: kube-proxy's flags that mean something to a userspace proxy, spelled and
 * defaulted as kube-proxy spells them, plus our own. Parsing never exits the process and never
 * prints: it returns what to print, so it is tested like any function. A bad flag value does not stop
 * parsing; every one is reported together.
 */

/** What the daemon was asked to do. */
export interface CliOptions {
  /** `--config`, "" when none. */
  configFile: string;
  /** `--write-config-to`, "" when none. */
  writeConfigTo: string;
  cleanup: boolean;
  /** `--exit-with-parent`. */
  exitWithParent: boolean;
  /** `--master`: overrides the kubeconfig's server URL (no config-file field, so it always applies). */
  master: string;
  /** The configuration fields the flags set (only flags given on the command line). */
  flags: ConfigInput;
  /** Long names (without "--") of the flags given on the command line. */
  explicit: Set<string>;
  /** Long names of the flags that map to a configuration field. */
  configFlags: ReadonlySet<string>;
}

/** Either options to run with, or text to print and an exit code. */
export type CliResult =
  | { kind: 'run'; options: CliOptions }
  | { kind: 'exit'; code: number; stdout: string; stderr: string };

/** Long name of a flag spec: "--v <level>" → "v". */
function longName(flags: string): string {
  return /--([\w-]+)/.exec(flags)?.[1] ?? flags;
}

/** Sets `obj.a.b.c = value`, creating the objects on the way. */
function setField(obj: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split('.');
  const last = keys.pop() as string;
  let node = obj;
  for (const key of keys) {
    node[key] ??= {};
    node = node[key] as Record<string, unknown>;
  }
  node[last] = value;
}

const HELP_AFTER = `
Sources: give --services-file to serve a manifest without a cluster, or --kubeconfig/--master (or run
in a Pod, where KUBERNETES_SERVICE_HOST is set) to follow a Kubernetes API server.

Precedence: defaults, then the --config file or, without one, the flags. --hostname-override,
--workers and the logging flags always win. Signals: SIGTERM and SIGINT stop accepting, let
established connections finish for up to --drain-timeout, then exit 0. docs/operations.md has every flag, field and metric.

Examples:
  userspace-proxy --services-file services.yaml --metrics-bind-address 127.0.0.1:10249
  userspace-proxy --config /etc/userspace-proxy/config.yaml
  userspace-proxy --cleanup
  userspace-proxy status [--json] [--metrics-address 127.0.0.1:10249]`;

/**
 * What commander left over: unknown flags (without their `=value`) and positional arguments. A word
 * right after an unknown flag may be that flag's value, so it is not also called an argument.
 */
export function splitLeftovers(args: readonly string[]): {
  unknown: string[];
  positional: string[];
} {
  const unknown: string[] = [];
  const positional: string[] = [];
  let afterUnknownFlag = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === '--') {
      positional.push(...args.slice(i + 1));
      break;
    }
    if (arg.startsWith('-') && arg !== '-') {
      const eq = arg.indexOf('=');
      unknown.push(eq > 0 ? arg.slice(0, eq) : arg);
      afterUnknownFlag = eq < 0;
      continue;
    }
    if (!afterUnknownFlag) positional.push(arg);
    afterUnknownFlag = false;
  }
  return { unknown, positional };
}

/** Builds the commander program; exported for the help-text test. */
export function buildProgram(): Command {
  const program = new Command('userspace-proxy')
    .description(
      'A user-space TCP/UDP proxy for Kubernetes Services: what kube-proxy\'s "userspace" mode was, as a daemon.',
    )
    .version(`userspace-proxy v${VERSION}`, '--version', 'Print version information and quit.')
    .helpOption('-h, --help', 'Show this help and quit.')
    .allowExcessArguments(true)
    // Unknown flags are collected and reported together (commander stops at the first one).
    .allowUnknownOption(true)
    .exitOverride()
    .configureHelp({ helpWidth: 100 })
    .addHelpText('after', HELP_AFTER);
  for (const spec of FLAGS) {
    const shown = spec.shownDefault === undefined ? '' : ` (default ${spec.shownDefault})`;
    const option = new Option(spec.flags, `${spec.description}${shown}`);
    if (spec.boolean) option.preset('true');
    if (spec.repeatable) option.argParser((v: string, prev?: string[]) => [...(prev ?? []), v]);
    program.addOption(option);
  }
  return program;
}

/**
 * Parses `argv` (without the node and script paths). Never throws and never prints: help, version
 * and errors come back as text with an exit code (0 for help and version, 1 for errors).
 */
export function parseCommandLine(argv: readonly string[]): CliResult {
  const program = buildProgram();
  let stdout = '';
  let stderr = '';
  program.configureOutput({
    writeOut: (s) => {
      stdout += s;
    },
    writeErr: (s) => {
      stderr += s;
    },
  });
  try {
    program.parse([...argv], { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) {
      const code = err.exitCode === 0 ? 0 : 1;
      if (code !== 0) stderr += "Run 'userspace-proxy --help' for usage.\n";
      return { kind: 'exit', code, stdout, stderr };
    }
    throw err;
  }
  const problems: string[] = [];
  const { unknown, positional } = splitLeftovers(program.args);
  for (const flag of unknown) problems.push(`unknown option '${flag}'`);
  if (positional.length > 0) {
    const got = positional.map((a) => JSON.stringify(a)).join(' ');
    problems.push(`"userspace-proxy" does not take any arguments, got [${got}]`);
  }
  const opts = program.opts<Record<string, string | string[] | undefined>>();
  const flags: Record<string, unknown> = {};
  const explicit = new Set<string>();
  const configFlags = new Set<string>();
  const action: Record<string, unknown> = {};
  for (const spec of FLAGS) {
    const name = longName(spec.flags);
    if (spec.field !== undefined) configFlags.add(name);
    const key = program.options.find((o) => o.long === `--${name}`)?.attributeName() ?? name;
    if (program.getOptionValueSource(key) !== 'cli') continue;
    explicit.add(name);
    const raw = opts[key];
    const parse: Parser = spec.boolean ? parseBool : (spec.parse ?? ((s) => s));
    let value: unknown;
    try {
      value = parse(Array.isArray(raw) ? raw.join(',') : (raw ?? ''));
    } catch (err) {
      if (!(err instanceof FlagValueError)) throw err;
      problems.push(`invalid argument ${JSON.stringify(raw)} for "--${name}" flag: ${err.message}`);
      continue;
    }
    if (spec.field !== undefined) setField(flags, spec.field, value);
    else action[name] = value;
  }
  if (problems.length > 0) {
    stderr += `${problems.map((p) => `Error: ${p}`).join('\n')}\nRun 'userspace-proxy --help' for usage.\n`;
    return { kind: 'exit', code: 1, stdout, stderr };
  }
  return {
    kind: 'run',
    options: {
      configFile: typeof action.config === 'string' ? action.config : '',
      writeConfigTo: typeof action['write-config-to'] === 'string' ? action['write-config-to'] : '',
      cleanup: action.cleanup === true,
      exitWithParent: action['exit-with-parent'] === true,
      master: typeof action.master === 'string' ? action.master : '',
      flags: flags as ConfigInput,
      explicit,
      configFlags,
    },
  };
}
