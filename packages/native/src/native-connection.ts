/**
 * What Node keeps of one connection the helper carries, and the dial attempt object core's dial
 * schedule drives in place of a `net.Socket`.
 */
import { EventEmitter } from 'node:events';
import type net from 'node:net';
import type {
  AcceptedConnection,
  AcceptedConnectionState,
  Logger,
  ProxySocketOptions,
} from '@userspace-proxy/core';
import type { NativeHelperError } from './errors.js';
import type { CloseHow } from './relay-protocol.js';

/** Core's socket options with their defaults filled in. */
export type SocketSettings = {
  readonly [K in keyof ProxySocketOptions]-?: Exclude<ProxySocketOptions[K], undefined>;
};

/**
 * The helper times each dial attempt out itself (precisely, whatever Node's event loop is doing),
 * so Node's own timer runs this much later, as a safety net for a helper that stopped answering.
 * Were Node's timer first, it would cancel an attempt the helper may have connected meanwhile.
 */
const NODE_DIAL_GRACE_MS = 1000;

const nodeTimeoutsCache = new WeakMap<readonly number[], readonly number[]>();

export function nodeTimeouts(timeouts: readonly number[]): readonly number[] {
  let t = nodeTimeoutsCache.get(timeouts);
  if (t === undefined) {
    t = Object.freeze(timeouts.map((ms) => ms + NODE_DIAL_GRACE_MS));
    nodeTimeoutsCache.set(timeouts, t);
  }
  return t;
}

/** What the engine needs of a socket. */
export interface EngineSocket {
  onAccepted(conn: NativeConnection): void;
  onClosed(conn: NativeConnection, how: CloseHow): void;
  onRefusedAtCap(): void;
  onAcceptError(error: NodeJS.ErrnoException): void;
  onHelperExit(error: NativeHelperError): void;
  /** A listen after a restart: undefined when it worked; `attempt` counts the retries from 1. */
  onRelisten(error: unknown, attempt?: number): void;
  /** Attempt 1 of a connection the helper dialled from a pick made ahead ended (errno 0: relaying). */
  onPickDialed(conn: NativeConnection, errno: number): void;
  /** A helper thread took epoch `epoch`'s picks ('p'). */
  onPicksTaken(thread: number, epoch: number): void;
  /** {@link AcceptedConnection.proxy} of a held connection (its state is already `dialling`). */
  handOver(conn: NativeConnection): void;
  /** One attempt of core's dial schedule for `conn` (its DialClient's `connect`). */
  dialAttempt(conn: NativeConnection, target: { host: string; port: number }): net.Socket;
  /** Core's dial schedule for `conn` ended: connected (`error` undefined) or failed. */
  dialDone(conn: NativeConnection, error: unknown, connected: boolean): void;
  /** {@link AcceptedConnection.refuse} of a connection not yet closed. */
  refuseConnection(conn: NativeConnection, reason: string): void;
  /** Where a failing close or dial-end listener is reported. */
  readonly logger: Logger;
}

type CloseListener = (connection: AcceptedConnection) => void;

/** What a dial attempt needs of the engine: to cancel it in the helper. */
export interface AttemptCanceller {
  cancel(conn: NativeConnection, attempt: number): void;
}

/**
 * One accepted connection, as Node sees it (the bytes are the helper's), and the accept policy's
 * {@link AcceptedConnection}: one object per connection, since a held client costs what its objects
 * cost. `state` is `closed` once Node closed it (a refusal) or the helper reported its end ('c').
 */
export class NativeConnection implements AcceptedConnection {
  readonly id: number;
  readonly socket: EngineSocket;
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly acceptedAt = performance.now();
  state: AcceptedConnectionState = 'new';
  endpoint = '';
  /** What the helper holds of a held client ('h'), until relaying starts. */
  held = 0;
  /** `proxy(onDialEnd)`'s callback, until the dial has ended. */
  dialEnd: ((connected: boolean) => void) | undefined;
  #closeListeners: CloseListener | CloseListener[] | undefined;
  #notified = false;
  bytesIn = 0;
  bytesOut = 0;
  /** The dial attempt in flight. */
  pending: DialAttempt | undefined;
  attempts = 0;
  /**
   * The epoch of the pick ring the helper took this connection's endpoint from (0: none, Node
   * dials); it stays set until that first attempt's 'd' arrives.
   */
  pickEpoch = 0;
  /** True once `connectionOpen` was published: its close is published then, and only then. */
  opened = false;
  /** True once an attempt connected (the helper relays), maybe before Node heard of the dial's end. */
  connected = false;

  constructor(id: number, socket: EngineSocket, address: string, port: number) {
    this.id = id;
    this.socket = socket;
    this.remoteAddress = address;
    this.remotePort = port;
  }

  get heldBytes(): number {
    return this.state === 'held' || this.state === 'dialling' ? this.held : 0;
  }

  proxy(onDialEnd?: (connected: boolean) => void): boolean {
    if (this.state !== 'held') return false;
    this.dialEnd = onDialEnd;
    this.state = 'dialling';
    this.socket.handOver(this);
    return true;
  }

  refuse(reason = 'policy'): boolean {
    if (this.state === 'closed') return false;
    this.socket.refuseConnection(this, reason);
    return true;
  }

  onClose(listener: (connection: AcceptedConnection) => void): void {
    if (this.#notified) {
      listener(this);
      return;
    }
    const listeners = this.#closeListeners;
    if (listeners === undefined) this.#closeListeners = listener;
    else if (typeof listeners === 'function') this.#closeListeners = [listeners, listener];
    else listeners.push(listener);
  }

  /**
   * Core's DialClient: the connection is its own dialler, so a dial allocates no promise, no
   * `then` callbacks and no connect closure (a hand-over of 10 000 made 30 000 of them).
   */
  connect(target: { host: string; port: number }): net.Socket {
    return this.socket.dialAttempt(this, target);
  }

  /** Core's DialClient: the dial schedule's end. */
  dialed(error: unknown, socket?: net.Socket): void {
    this.socket.dialDone(this, error, socket !== undefined);
  }

  /** The dial of a hand-over ended (once; later calls do nothing). */
  endDial(connected: boolean): void {
    const listener = this.dialEnd;
    if (listener === undefined) return;
    this.dialEnd = undefined;
    try {
      listener(connected);
    } catch (error) {
      this.socket.logger.error('a dial-end listener failed', error);
    }
  }

  /** Marks the connection closed for good and tells the listeners, once. */
  markClosed(): void {
    this.state = 'closed';
    if (this.#notified) return;
    this.#notified = true;
    this.endDial(false);
    const listeners = this.#closeListeners;
    this.#closeListeners = undefined;
    if (listeners === undefined) return;
    if (typeof listeners === 'function') this.#callCloseListener(listeners);
    else for (const listener of listeners) this.#callCloseListener(listener);
  }

  #callCloseListener(listener: CloseListener): void {
    try {
      listener(this);
    } catch (error) {
      this.socket.logger.error('a connection close listener failed', error);
    }
  }
}

/**
 * One dial attempt in the shape core's dial schedule drives (`tryConnectEndpoints` listens for
 * 'connect' and 'error' and calls `destroy()` on a timeout): the helper connects, Node decides.
 */
export class DialAttempt extends EventEmitter {
  destroyed = false;
  #settled = false;
  readonly #engine: AttemptCanceller;
  readonly conn: NativeConnection;
  readonly attempt: number;

  constructor(engine: AttemptCanceller, conn: NativeConnection, attempt: number) {
    super();
    this.#engine = engine;
    this.conn = conn;
    this.attempt = attempt;
  }

  /** The schedule gave up on this attempt (timeout, abort): the helper resets it. */
  destroy(): this {
    if (this.destroyed) return this;
    this.destroyed = true;
    if (!this.#settled) {
      this.#settled = true;
      if (this.conn.pending === this) this.conn.pending = undefined;
      this.#engine.cancel(this.conn, this.attempt);
    }
    return this;
  }

  /** @internal the helper's answer. */
  settle(error: NodeJS.ErrnoException | undefined): void {
    if (this.#settled) return;
    this.#settled = true;
    if (this.conn.pending === this) this.conn.pending = undefined;
    if (error === undefined) {
      this.conn.connected = true;
      if (this.conn.state !== 'closed') this.conn.state = 'relaying';
      this.conn.held = 0;
      // Now, not when the dial schedule's promise settles: the connection's 'c' may be the next
      // frame of this chunk, and it would report a dial that connected as failed.
      this.conn.endDial(true);
      this.emit('connect');
    } else {
      this.emit('error', error);
    }
  }
}
