import type { ProxySocketContext } from './proxy-socket.js';

/**
 * What the default TCP socket does with one accepted client:
 * - `proxy`: dial an endpoint now and relay (the default);
 * - `hold`: keep the client, unanswered, until the policy calls `proxy()` or `refuse()` on it (an
 *   idling socket holds while its Service has no endpoints and hands the clients over when they come);
 * - `refuse`: close the client at once (counted as a refusal with reason `policy`).
 */
export type AcceptVerdict = 'proxy' | 'hold' | 'refuse';

/** Where an accepted connection is in its life. */
export type AcceptedConnectionState = 'new' | 'held' | 'dialling' | 'relaying' | 'closed';

/**
 * One accepted client, as an accept policy sees it. The policy never gets the socket itself: what it
 * may do is this object's methods, so a policy cannot read the client's bytes or break the relay.
 */
export interface AcceptedConnection {
  /** The client's address ("" when it can no longer be read); read from the socket on first use. */
  readonly remoteAddress: string;
  /** The client's port (0 when unknown). */
  readonly remotePort: number;
  /** `performance.now()` when the connection was accepted. */
  readonly acceptedAt: number;
  /** Where the connection is now. */
  readonly state: AcceptedConnectionState;
  /**
   * The endpoint it was relayed to, "ip:port"; "" until a dial succeeded. An idler's close listener
   * reads it to tell a hand-over that reached a backend from one whose dials all failed.
   */
  readonly endpoint: string;
  /**
   * Bytes the client sent while held. They are read into a bounded buffer (so a client that gives
   * up is noticed at once) and written to the endpoint before anything else after `proxy()`. A
   * held client that closes (or sends its FIN before any byte) is dropped at once; one that sent a
   * request and then its FIN stays held, since it may be waiting for the answer.
   */
  readonly heldBytes: number;
  /**
   * Hands a held connection to the normal dial-and-relay path (the socket's dial schedule, ClientIP
   * affinity), its early bytes first. False when the connection is not held (already closed,
   * proxied or refused): then nothing happens. `onDialEnd`, when given, is called once when the
   * dial has ended: `true` once an endpoint answered (the relay starts), `false` when every attempt
   * failed or the connection closed first. An idler uses it to bound how many hand-over dials are
   * in flight at once (each holds a descriptor and a dial timer). The client is still read into
   * its hold buffer while the dial is in flight, and one that goes away meanwhile closes the
   * connection at once.
   */
  proxy(onDialEnd?: (connected: boolean) => void): boolean;
  /**
   * Closes the connection: a held one at once (with RST when it sent bytes that will never be
   * answered, so its client does not mistake the close for a complete answer), counted as a
   * refusal with `reason` (default `policy`). False when the connection was already closed.
   */
  refuse(reason?: string): boolean;
  /**
   * Calls `listener` once when the connection has closed for good, whatever ended it (the client
   * went away while held, the relay finished, a refusal, a failed dial). Runs at once if it already
   * has.
   */
  onClose(listener: (connection: AcceptedConnection) => void): void;
}

/**
 * Decides per accepted connection; one policy serves one socket. `accept` runs synchronously in the
 * accept path, before anything is read from the client: it must be quick and must not throw (a
 * throw refuses that client and is logged). A policy that holds keeps the connections it returned
 * `hold` for and later calls `proxy()` or `refuse()` on each.
 */
export interface AcceptPolicy {
  /** The verdict for a new connection. */
  accept(connection: AcceptedConnection): AcceptVerdict;
  /** Called once when the socket closes (stop timers; held connections are closed by the socket). */
  close?(): void;
}

/** Makes the policy of one socket from its context (where it can subscribe to endpoint changes). */
export type AcceptPolicyFactory = (context: ProxySocketContext) => AcceptPolicy;

/** The default policy: every connection is proxied at once. */
export const PROXY_EVERY_CONNECTION: AcceptPolicy = Object.freeze({
  accept: (): AcceptVerdict => 'proxy',
});
