import { type Mock, vi } from 'vitest';
import type { Logger } from '../logger.js';

/** A {@link Logger} whose every level is a `vi.fn()`, and whose sub-loggers are itself. */
export type SpyLogger = Logger & {
  [L in 'silly' | 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal']: Mock<
    (...args: unknown[]) => unknown
  >;
};

/**
 * A logger that records calls, for tests that check what a component logs (and that it logs at
 * all). Sub-loggers are the same object, so a component's own sub-logger is spied on too.
 */
export function spyLogger(): SpyLogger {
  const logger: SpyLogger = {
    silly: vi.fn(),
    trace: vi.fn(),
    debug: vi.fn(),
    info: vi.fn(),
    warn: vi.fn(),
    error: vi.fn(),
    fatal: vi.fn(),
    getSubLogger: () => logger,
  };
  return logger;
}
