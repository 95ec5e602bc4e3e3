import { createServer, type RequestListener, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { DescriptorBudget } from './fd-budget.js';

/**
 * The limits of the health and metrics servers. They are reachable by anyone who can reach the port
 * (the health server listens on every address, as kube-proxy's does), so no client may hold more than
 * a bounded share of the process: a cap on connections per server, a deadline for the request
 * headers that Node really enforces, a deadline for idle connections, and a descriptor reserve for
 * the proxy (fd-budget.ts). Whatever is refused is closed at once and counted.
 */

/** Connections one HTTP server keeps at once; more are closed as they arrive. */
export const HTTP_MAX_CONNECTIONS = 64;
/** From connecting, how long a client may take to send a request's headers. */
export const HTTP_HEADERS_TIMEOUT_MS = 10_000;
/** How long a connection may stay silent (no bytes either way) before it is closed. */
export const HTTP_IDLE_TIMEOUT_MS = 10_000;
/** How long a kept-alive connection may wait for its next request. */
export const HTTP_KEEP_ALIVE_TIMEOUT_MS = 5000;
/**
 * How often Node checks the header and request deadlines. Node's default is 30 s, which made a
 * 10 s header timeout a 10–40 s one; 1 s keeps it within a second.
 */
export const HTTP_TIMEOUT_CHECK_MS = 1000;

/** Why an HTTP connection was refused (the `reason` of the refusal counter). */
export type HttpRefusal = 'connection-limit' | 'descriptors';

/** The limits of one server; each has the default above. */
export interface HttpLimits {
  maxConnections?: number;
  headersTimeoutMs?: number;
  /** For the whole request (headers and body), default the headers timeout. */
  requestTimeoutMs?: number;
  idleTimeoutMs?: number;
  keepAliveTimeoutMs?: number;
  timeoutCheckMs?: number;
  /** Refuses connections when the process is near its descriptor limit; default none. */
  descriptors?: DescriptorBudget;
  /** Told about each refused connection; must not throw. */
  onRefused?: (reason: HttpRefusal) => void;
}

/** An HTTP server for `handler` with `limits` applied; see the module comment. */
export function createLimitedServer(handler: RequestListener, limits: HttpLimits = {}): Server {
  const headersTimeout = limits.headersTimeoutMs ?? HTTP_HEADERS_TIMEOUT_MS;
  const server = createServer(
    {
      headersTimeout,
      requestTimeout: limits.requestTimeoutMs ?? headersTimeout,
      keepAliveTimeout: limits.keepAliveTimeoutMs ?? HTTP_KEEP_ALIVE_TIMEOUT_MS,
      connectionsCheckingInterval: limits.timeoutCheckMs ?? HTTP_TIMEOUT_CHECK_MS,
    },
    handler,
  );
  const refused = (reason: HttpRefusal) => {
    try {
      limits.onRefused?.(reason);
    } catch {
      // counting must never break the server
    }
  };
  server.maxConnections = limits.maxConnections ?? HTTP_MAX_CONNECTIONS;
  // Node closes connections over maxConnections itself, and says so with 'drop'.
  server.on('drop', () => refused('connection-limit'));
  const descriptors = limits.descriptors;
  if (descriptors !== undefined) {
    // 'connection' listeners run in order: this one, added first, closes the socket before the
    // HTTP machinery reads from it.
    server.prependListener('connection', (socket: Socket) => {
      if (descriptors.hasRoom()) return;
      socket.destroy();
      refused('descriptors');
    });
  }
  // A connection that sends nothing never starts a request, so no request deadline covers it.
  server.setTimeout(limits.idleTimeoutMs ?? HTTP_IDLE_TIMEOUT_MS, (socket: Socket) =>
    socket.destroy(),
  );
  return server;
}
