/**
 * The logger every component takes. Its shape is a subset of tslog 4's `Logger`, so a tslog logger
 * (or anything with these methods) can be passed as is. Library code never writes to the console:
 * the default is {@link noopLogger}, and the daemon passes a real one.
 */
export interface Logger {
  silly(...args: unknown[]): unknown;
  trace(...args: unknown[]): unknown;
  debug(...args: unknown[]): unknown;
  info(...args: unknown[]): unknown;
  warn(...args: unknown[]): unknown;
  error(...args: unknown[]): unknown;
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
