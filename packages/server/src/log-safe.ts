/**
 * The log-safe helpers live in core (`@userspace-proxy/core/diagnostics`), which applies them to
 * what it logs itself; the daemon's modules keep importing them from here.
 */
export {
  LOG_MESSAGE_MAX_CHARS,
  LOG_VALUE_MAX_CHARS,
  logSafe,
  quoteForLog,
} from '@userspace-proxy/core/diagnostics';
