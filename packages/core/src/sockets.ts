/**
 * `@userspace-proxy/core/sockets`: the building blocks for authors of proxy sockets — the relay,
 * the endpoint dialer, accept back-off, the idle wheel, the log limiter, the diagnostics channel
 * names. The root entry point holds the contracts, defaults and factories most users need; this one
 * is for people who write a ProxySocket of their own. Named exports only: a new export is a decision.
 */

export { AcceptBackoff, MAX_ACCEPT_BACKOFF_MS } from './sockets/accept-backoff.js';
export { LogLimiter } from './sockets/log-limiter.js';
export { SilenceWheel, type Silent } from './sockets/silence-wheel.js';
