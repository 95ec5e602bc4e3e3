import { createLogger, type Logger } from '@userspace-proxy/core';

/**
 * The daemon's logger: tslog through core's createLogger, "text" (pretty) or "json" lines on stderr,
 * with klog-style verbosity mapped onto tslog levels. kube-proxy's V(1)/V(2) messages are our debug
 * level, its per-connection V(3)/V(4) messages our trace level.
 */

/** tslog level ids. */
const SILLY = 0;
const TRACE = 1;
const DEBUG = 2;
const INFO = 3;

/** The tslog minLevel for a klog verbosity: 0 info, 1–2 debug, 3–4 trace, 5+ silly. */
export function verbosityToMinLevel(verbosity: number): number {
  if (verbosity <= 0) return INFO;
  if (verbosity <= 2) return DEBUG;
  if (verbosity <= 4) return TRACE;
  return SILLY;
}

/** Options of {@link createDaemonLogger}. */
export interface DaemonLoggerOptions {
  /** "text" or "json" (the `--logging-format` values). */
  format: string;
  verbosity: number;
  /** Where lines go; default stderr. */
  write?: (line: string) => void;
  /** ANSI colours in text lines; default: when stderr is a terminal. */
  colors?: boolean;
}

/** The root logger of the daemon, named "userspace-proxy". */
export function createDaemonLogger(options: DaemonLoggerOptions): Logger {
  return createLogger({
    name: 'userspace-proxy',
    format: options.format === 'json' ? 'json' : 'pretty',
    minLevel: verbosityToMinLevel(options.verbosity),
    ...(options.write ? { write: options.write } : {}),
    ...(options.colors !== undefined ? { colors: options.colors } : {}),
  });
}
