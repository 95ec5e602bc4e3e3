import { formatWithOptions } from 'node:util';
import { type ILogObj, Logger as TsLogger } from 'tslog';

/**
 * The logger every component takes. Its shape is a subset of tslog 4's `Logger`, so a tslog logger
 * (or anything with these methods) can be passed as is. Library code never writes to the console:
 * the default is {@link noopLogger}, and the daemon passes a real one.
 */
export interface Logger {
  /** tslog level 0: what only a developer chasing a bug wants. */
  silly(...args: unknown[]): unknown;
  /** Level 1: every step (the daemon's -v 4 and up: commands run, datagrams dropped). */
  trace(...args: unknown[]): unknown;
  /** Level 2: routine decisions (a proxy socket opened, a client refused for no endpoints). */
  debug(...args: unknown[]): unknown;
  /** Level 3: what an operator reads (a sync applied, the daemon started or drained). */
  info(...args: unknown[]): unknown;
  /** Level 4: something is wrong but serving goes on (a dial failed, input was rejected). */
  warn(...args: unknown[]): unknown;
  /** Level 5: a component failed (a handler threw, a socket could not close). */
  error(...args: unknown[]): unknown;
  /** Level 6: the process cannot go on. */
  fatal(...args: unknown[]): unknown;
  /** A child logger for one component; its name shows in every line it writes. */
  getSubLogger(settings?: { name?: string }): Logger;
}

const noop = (): undefined => undefined;

/** A logger that drops everything: the default, so that embedding the library is silent. */
export const noopLogger: Logger = {
  silly: noop,
  trace: noop,
  debug: noop,
  info: noop,
  warn: noop,
  error: noop,
  fatal: noop,
  getSubLogger: () => noopLogger,
};

/** The sub-logger for `component`, or the silent one when no logger was given. */
export function componentLogger(logger: Logger | undefined, component: string): Logger {
  return logger ? logger.getSubLogger({ name: component }) : noopLogger;
}

/**
 * The sub-logger for `component`, made on its first use rather than now: for what exists once per
 * Service port (a proxy socket's logger), where a tslog sub-logger and its copied settings are
 * about 500 bytes each (5 MB at 10 000 listeners) and most sockets never write a line. The parent's
 * `getSubLogger` is called at most once, with the same settings {@link componentLogger} passes. A
 * line below the parent's level (a tslog `settings.minLevel`, read at each call) is dropped without
 * making the sub-logger, as tslog would drop it: a socket's routine debug lines cost nothing.
 */
export function deferredComponentLogger(logger: Logger | undefined, component: string): Logger {
  return logger === undefined || logger === noopLogger
    ? noopLogger
    : new DeferredSubLogger(logger, component);
}

/** The Logger methods that write a line, one per tslog level. */
type LevelMethod = 'silly' | 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';

/** See {@link deferredComponentLogger}: three fields until something is logged. */
class DeferredSubLogger implements Logger {
  readonly #parent: Logger;
  readonly #name: string;
  #real: Logger | undefined;

  constructor(parent: Logger, name: string) {
    this.#parent = parent;
    this.#name = name;
  }

  /** True when the parent drops lines of `level` (tslog's numbering) and this one can too. */
  #below(level: number): boolean {
    const min = (this.#parent as { settings?: { minLevel?: unknown } }).settings?.minLevel;
    return typeof min === 'number' && level < min;
  }

  #logger(): Logger {
    this.#real ??= this.#parent.getSubLogger({ name: this.#name });
    return this.#real;
  }

  /** Writes at `level` through the real sub-logger, made now if it does not exist yet. */
  #at(level: number, method: LevelMethod, args: unknown[]): unknown {
    return this.#below(level) ? undefined : this.#logger()[method](...args);
  }

  silly(...args: unknown[]): unknown {
    return this.#at(0, 'silly', args);
  }
  trace(...args: unknown[]): unknown {
    return this.#at(1, 'trace', args);
  }
  debug(...args: unknown[]): unknown {
    return this.#at(2, 'debug', args);
  }
  info(...args: unknown[]): unknown {
    return this.#at(3, 'info', args);
  }
  warn(...args: unknown[]): unknown {
    return this.#at(4, 'warn', args);
  }
  error(...args: unknown[]): unknown {
    return this.#at(5, 'error', args);
  }
  fatal(...args: unknown[]): unknown {
    return this.#at(6, 'fatal', args);
  }
  getSubLogger(settings?: { name?: string }): Logger {
    return this.#logger().getSubLogger(settings);
  }
}

/** Options of {@link createLogger}. */
export interface CreateLoggerOptions {
  /** The root name, shown in every line. */
  name?: string;
  /** "json": one object per line, for collectors; "pretty": for people; "hidden": transports only. Default "pretty". */
  format?: 'json' | 'pretty' | 'hidden';
  /** The lowest level written: 0 silly, 1 trace, 2 debug, 3 info, 4 warn, 5 error, 6 fatal. Default 3. */
  minLevel?: number;
  /** Where each finished line goes. Default: process.stderr, so stdout stays free for program output. */
  write?: (line: string) => void;
  /** ANSI colours in "pretty" lines. Default: only when stderr is a terminal. */
  colors?: boolean;
}

/**
 * A tslog 4 logger that satisfies {@link Logger}. It lives in core (which depends on tslog) so that the
 * daemon and the examples get the project's one log format without each depending on tslog.
 */
export function createLogger(options: CreateLoggerOptions = {}): Logger {
  const write = options.write ?? ((line: string) => process.stderr.write(`${line}\n`));
  const colors = options.colors ?? process.stderr.isTTY === true;
  return new TsLogger<ILogObj>({
    name: options.name ?? 'userspace-proxy',
    type: options.format ?? 'pretty',
    minLevel: options.minLevel ?? 3,
    stylePrettyLogs: colors,
    hideLogPositionForProduction: true,
    prettyInspectOptions: { colors, breakLength: Number.POSITIVE_INFINITY, depth: 6 },
    prettyLogLevelMethod: {
      '*': (...args: unknown[]) => write(formatWithOptions({ colors }, ...args)),
    },
    overwrite: { transportJSON: (json: unknown) => write(safeStringify(json)) },
  });
}

/** JSON.stringify that survives cycles and bigints: a log line must never throw. */
function safeStringify(value: unknown): string {
  const seen = new WeakSet<object>();
  return JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v === 'bigint') return v.toString();
    if (typeof v === 'object' && v !== null) {
      if (seen.has(v)) return '[Circular]';
      seen.add(v);
    }
    return v;
  });
}
