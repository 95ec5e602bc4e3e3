import { createServer, type RequestListener, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { DescriptorBudget } from './fd-budget.js';

/**
 * The limits of the health and metrics servers. They are reachable by anyone who can reach the port
 * (the health server listens on every address, as kube-proxy's does), so no client may hold more than
 * a bounded share of the process: a cap on connections per server and a smaller one per client
 * address (so one client's idle connections cannot take /healthz away from the kubelet's probes or
 * a load balancer's checks), a deadline for the request headers that Node really enforces (from the
 * connection's start: it also reaps a connection that sends nothing), a deadline for idle
 * connections, and a descriptor reserve for the proxy (fd-budget.ts). Whatever is refused is closed
 * at once and counted.
 */

/** Connections one HTTP server keeps at once; more are closed as they arrive. */
export const HTTP_MAX_CONNECTIONS = 64;
/**
 * Connections one client address keeps on one server at once; more are closed as they arrive. A
 * quarter of {@link HTTP_MAX_CONNECTIONS}: one client alone can no longer fill the server, while a
 * scraper or a prober, which use one or two connections, never comes near it.
 */
export const HTTP_MAX_CONNECTIONS_PER_CLIENT = 16;
/**
 * From connecting (or, on a kept-alive connection, from a request's first byte), how long a client
 * may take to send a request's headers. Node starts this deadline when it accepts the connection, so
 * a connection that sends nothing is closed by it too (with a 408). Probes and scrapers send their
 * headers at once; 3 s reaps a flood of silent connections quickly.
 */
export const HTTP_HEADERS_TIMEOUT_MS = 3000;
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
export type HttpRefusal = 'connection-limit' | 'client-limit' | 'descriptors';

/** The limits of one server; each has the default above. */
export interface HttpLimits {
  maxConnections?: number;
  /** Per client address (an IPv4-mapped IPv6 address counts as its IPv4 address). */
  maxConnectionsPerClient?: number;
  headersTimeoutMs?: number;
  /** For the whole request (headers and body), default the headers timeout. */
  requestTimeoutMs?: number;
  idleTimeoutMs?: number;
  keepAliveTimeoutMs?: number;
  timeoutCheckMs?: number;
  /** Refuses connections when the process is near its descriptor limit; default none. */
  descriptors?: DescriptorBudget;
  /**
   * Told about each refused connection, with the client's address ("" when unknown), so that the
   * daemon can count it and log who; a throw is ignored.
   */
  onRefused?: (reason: HttpRefusal, client: string) => void;
}

/** The address a client is counted by: an IPv4-mapped IPv6 address as its IPv4 address. */
function clientKey(address: string | undefined): string {
  if (address === undefined) return '';
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
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
  const refused = (reason: HttpRefusal, client: string) => {
    try {
      limits.onRefused?.(reason, client);
    } catch {
      // counting must never break the server
    }
  };
  server.maxConnections = limits.maxConnections ?? HTTP_MAX_CONNECTIONS;
  // Node closes connections over maxConnections itself, and says so with 'drop'.
  server.on('drop', (data?: { remoteAddress?: string }) =>
    refused('connection-limit', clientKey(data?.remoteAddress)),
  );
  const descriptors = limits.descriptors;
  const perClient = limits.maxConnectionsPerClient ?? HTTP_MAX_CONNECTIONS_PER_CLIENT;
  const open = new Map<string, number>();
  // 'connection' listeners run in order: this one, added first, closes the socket before the HTTP
  // machinery reads from it.
  server.prependListener('connection', (socket: Socket) => {
    const client = clientKey(socket.remoteAddress);
    if (descriptors !== undefined && !descriptors.hasRoom()) {
      socket.destroy();
      refused('descriptors', client);
      return;
    }
    const held = open.get(client) ?? 0;
    if (held >= perClient) {
      socket.destroy();
      refused('client-limit', client);
      return;
    }
    open.set(client, held + 1);
    socket.once('close', () => {
      const left = (open.get(client) ?? 1) - 1;
      if (left > 0) open.set(client, left);
      else open.delete(client);
    });
  });
  // The header deadline covers a connection until its request is in (a silent one included: Node
  // starts it at accept); this covers the rest, such as a client that never reads its response.
  server.setTimeout(limits.idleTimeoutMs ?? HTTP_IDLE_TIMEOUT_MS, (socket: Socket) =>
    socket.destroy(),
  );
  return server;
}
