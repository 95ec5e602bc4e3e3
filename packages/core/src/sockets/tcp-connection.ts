import type net from 'node:net';
import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import type { Logger } from '../logger.js';
import type { Addr } from '../model/model.js';
import { joinHostPort, type ServicePortName } from '../model/service-port-name.js';
import type { AcceptedConnection, AcceptedConnectionState } from './accept-policy.js';
import { type DialClient, type DialOptions, dialEndpoints } from './dial-endpoints.js';
import type { LiveConnections, LiveLink } from './live-connections.js';
import {
  connectForRelay,
  ignoreError,
  readEarly,
  TcpRelay,
  type TcpRelayOptions,
} from './tcp-relay.js';

/** The default TCP socket as its connections see it: what they share, and whom they report to. */
export interface TcpConnectionOwner {
  readonly service: ServicePortName;
  /** Where a failing close listener is reported. */
  readonly log: Logger;
  readonly lb: LoadBalancer;
  readonly dialOptions: DialOptions;
  readonly relayOptions: TcpRelayOptions;
  readonly holdBufferBytes: number;
  /** Opens one dial attempt with the socket options and the relay's read buffers. */
  readonly connectEndpoint: (target: { host: string; port: number }) => net.Socket;
  /** Switches an accepted client to the relay's read buffers (or not: then `usesOnread` false). */
  adopt(raw: net.Socket): { socket: net.Socket; usesOnread: boolean };
  /** The dial of `conn` ended: with `backend`, relay it; without, the error. */
  dialed(conn: TcpConnection, error: unknown, backend?: net.Socket, endpoint?: string): void;
  /** `conn` was refused by its policy (`detail` is the policy's reason). */
  refused(conn: TcpConnection, detail: string): void;
  /** `conn` has closed for good (called once per connection the owner counted). */
  ended(conn: TcpConnection): void;
  /** The owner's live connections: a connection links itself in when made, out when closed. */
  readonly live: LiveConnections<TcpConnection>;
}

/** The connection a held client's socket belongs to, for the listeners every held client shares. */
const kHeldBy = Symbol('userspace-proxy:held-by');
type HeldSocket = net.Socket & { [kHeldBy]?: TcpConnection | undefined };

function onHeldData(this: HeldSocket, chunk: Buffer): void {
  this[kHeldBy]?.heldData(chunk);
}
function onHeldClose(this: HeldSocket): void {
  this[kHeldBy]?.heldClosed();
}

/**
 * Reads of a held client up to this size are copied (the first into a latin1 string, later ones
 * into Node's shared pool): the read's own buffer (a backing store and an ArrayBuffer per read,
 * about 200 bytes for a 1-byte request) is then garbage, and thousands of held clients cost their
 * bytes, not their reads.
 */
const HELD_COPY_BYTES = 1024;

type CloseListener = (connection: AcceptedConnection) => void;

/**
 * One accepted TCP client, from accept to its last byte: the policy's {@link AcceptedConnection},
 * its own dialler, and its relay. One object instead of a relay, an address, an options object and
 * a handful of closures, because an idle connection costs what its objects cost. The client's
 * address is read from the socket only when someone asks (a round-robin balancer without ClientIP
 * affinity never does: a getpeername(2) saved per connection).
 */
export class TcpConnection
  extends TcpRelay
  implements Addr, DialClient, AcceptedConnection, LiveLink<TcpConnection>
{
  readonly owner: TcpConnectionOwner;
  readonly acceptedAt = performance.now();
  /** The client socket: the accepted one, or the one that took over its handle. */
  client: net.Socket;
  clientUsesOnread = false;
  backendUsesOnread = false;
  endpoint = '';
  #state: AcceptedConnectionState = 'new';
  /**
   * What a held client sent (undefined until its first byte): kept through its hand-over dial, and
   * written to the endpoint first when relaying starts. A short first read is kept as a latin1
   * string (its bytes and a 16-byte header; a one-byte request is V8's shared one-character
   * string) rather than a Buffer (a 96-byte view and its bytes in Node's pool); one chunk is kept
   * bare, not in an array.
   */
  #heldChunks: string | Buffer | Buffer[] | undefined;
  #heldBytes = 0;
  /** One listener, or several: most connections have none or one (an idler's). */
  #closeListeners: CloseListener | CloseListener[] | undefined;
  /** `proxy(onDialEnd)`'s callback, until the dial has ended. */
  #dialEnd: ((connected: boolean) => void) | undefined;
  #address: string | undefined;
  #port = 0;
  /** Links of the owner's live list: two fields, no per-connection entry object. */
  liveNext: TcpConnection | undefined;
  livePrev: TcpConnection | undefined;

  constructor(owner: TcpConnectionOwner, client: net.Socket) {
    super(owner.relayOptions);
    this.owner = owner;
    this.client = client;
    owner.live.add(this);
  }

  get state(): AcceptedConnectionState {
    return this.#state;
  }

  get heldBytes(): number {
    return (this.client as HeldSocket)[kHeldBy] === this ? this.#heldBytes : 0;
  }

  get address(): string {
    if (this.#address === undefined) {
      this.#address = this.client.remoteAddress ?? '';
      this.#port = this.client.remotePort ?? 0;
    }
    return this.#address;
  }

  get port(): number {
    return this.address === '' ? 0 : this.#port;
  }

  get remoteAddress(): string {
    return this.address;
  }

  get remotePort(): number {
    return this.port;
  }

  override toString(): string {
    return this.address === '' ? '' : joinHostPort(this.address, this.port);
  }

  /**
   * Dials at once (the `proxy` verdict): the client goes on the copy-free read path first, and is
   * read while the dial is in flight, as a `pipe()` relay does: its request is then written the
   * moment the endpoint connects, instead of one more trip through the event loop (`epoll_ctl`,
   * `epoll_wait`, `read`) after it. Bounded: reading stops once 4 KiB wait (see `readEarly`), so
   * a client still cannot make the proxy buffer much while its dial is in flight.
   */
  dial(): void {
    const adopted = this.owner.adopt(this.client);
    const client = adopted.socket;
    this.client = client;
    this.clientUsesOnread = adopted.usesOnread;
    client.on('error', ignoreError);
    this.#state = 'dialling';
    dialEndpoints(this.owner.service, this, 'TCP', this.owner.lb, this.owner.dialOptions, this);
    // After the dial started, so that connect(2) goes out before the client's read is armed.
    if (adopted.usesOnread && this.#state === 'dialling') readEarly(client);
  }

  /**
   * Holds (the `hold` verdict): reads into a bounded buffer so a client that leaves is seen. A FIN
   * after a request may be a client that half-closed and waits for its answer (kept); a FIN with
   * nothing sent is a client that gave up, since nothing could ever answer it: until its first
   * byte the socket does not allow half-open, so Node ends and closes it by itself, and the shared
   * 'close' listener releases it (no 'end' listener: Node's own is there already, and a second
   * one costs an array per held client).
   */
  hold(): void {
    const client = this.client as HeldSocket;
    this.#state = 'held';
    this.#heldBytes = 0;
    // Listeners shared by every held client (no closures per connection); they find this
    // connection through the socket.
    client[kHeldBy] = this;
    client.allowHalfOpen = false;
    client.on('error', ignoreError);
    client.on('data', onHeldData);
    client.on('close', onHeldClose);
    client.resume();
  }

  /** A held client's bytes (the shared 'data' listener; not for callers). */
  heldData(chunk: Buffer): void {
    if (this.#state !== 'held' && this.#state !== 'dialling') return;
    const chunks = this.#heldChunks;
    if (chunks === undefined) {
      // It sent a request: a FIN from now on is a half-close, kept (see `hold`).
      this.client.allowHalfOpen = true;
      this.#heldChunks = chunk.length <= HELD_COPY_BYTES ? chunk.toString('latin1') : chunk;
    } else {
      const kept = chunk.length <= HELD_COPY_BYTES ? Buffer.from(chunk) : chunk;
      if (Array.isArray(chunks)) chunks.push(kept);
      else this.#heldChunks = [heldBuffer(chunks), kept];
    }
    this.#heldBytes += chunk.length;
    if (this.#heldBytes >= this.owner.holdBufferBytes) this.client.pause();
  }

  /** A held client closed (the shared 'close' listener; not for callers). */
  heldClosed(): void {
    this.#release();
    this.markClosed();
  }

  /**
   * The hand-over. The client stays as it was held while the dial is in flight: still read into
   * its hold buffer (no pause, and no read restarted when relaying starts: a trip through the
   * stream's pause and resume saved per client), and a close is seen at once.
   */
  proxy(onDialEnd?: (connected: boolean) => void): boolean {
    if (this.#state !== 'held') return false;
    this.#dialEnd = onDialEnd;
    this.#state = 'dialling';
    // While it dials, a FIN is carried through once relaying starts.
    this.client.allowHalfOpen = true;
    dialEndpoints(this.owner.service, this, 'TCP', this.owner.lb, this.owner.dialOptions, this);
    return true;
  }

  refuse(reason = 'policy'): boolean {
    switch (this.#state) {
      case 'closed':
        return false;
      case 'relaying':
        this.destroy();
        return true;
      default: {
        const unanswered = this.heldBytes > 0 || this.#state === 'dialling';
        this.#release();
        if (unanswered && !this.client.destroyed) this.client.resetAndDestroy();
        else this.client.destroy();
        this.owner.refused(this, reason);
        this.markClosed();
        return true;
      }
    }
  }

  /**
   * Resets the connection now (a drain's deadline passed): both legs of a relayed one get an RST; a
   * held or dialling client gets an RST and the connection is closed at once (a dial still in flight
   * is dropped when it ends).
   */
  abort(): void {
    switch (this.#state) {
      case 'closed':
        return;
      case 'relaying':
        this.destroy();
        return;
      default:
        this.#release();
        if (!this.client.destroyed) this.client.resetAndDestroy();
        this.markClosed();
    }
  }

  onClose(listener: (connection: AcceptedConnection) => void): void {
    if (this.#state === 'closed') {
      listener(this);
      return;
    }
    const listeners = this.#closeListeners;
    if (listeners === undefined) this.#closeListeners = listener;
    else if (typeof listeners === 'function') this.#closeListeners = [listeners, listener];
    else listeners.push(listener);
  }

  /** DialClient: one attempt, with the owner's socket options. */
  connect(target: { host: string; port: number }): net.Socket {
    const { socket, usesOnread } = connectForRelay(this.owner.connectEndpoint, target);
    this.backendUsesOnread = usesOnread;
    return socket;
  }

  /** DialClient: the dial ended. */
  dialed(error: unknown, socket?: net.Socket, endpoint?: string): void {
    if (this.#state === 'closed') {
      // Refused while dialling: the endpoint is not wanted any more.
      socket?.destroy();
      this.abandon();
      return;
    }
    this.owner.dialed(this, error, socket, endpoint);
  }

  /** Starts relaying to `backend`, with what the client sent while held. */
  relay(backend: net.Socket): void {
    this.#state = 'relaying';
    if (this.#dialEnd !== undefined) this.#endDial(true);
    const early = this.#release();
    this.start(
      this.client,
      backend,
      { client: this.clientUsesOnread, backend: this.backendUsesOnread },
      early,
    );
  }

  /** Marks the connection closed for good and tells the owner and the listeners, once. */
  markClosed(): void {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    this.owner.live.delete(this);
    this.owner.ended(this);
    if (this.#dialEnd !== undefined) this.#endDial(false);
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
      this.owner.log.error('a connection close listener failed', error);
    }
  }

  #endDial(connected: boolean): void {
    const listener = this.#dialEnd as (connected: boolean) => void;
    this.#dialEnd = undefined;
    try {
      listener(connected);
    } catch (error) {
      this.owner.log.error('a dial-end listener failed', error);
    }
  }

  /** Stops holding; returns what the client sent meanwhile. */
  #release(): Buffer[] | undefined {
    const client = this.client as HeldSocket;
    if (client[kHeldBy] !== this) return undefined;
    // Cleared rather than deleted: a deleted property can turn the socket into a slow dictionary.
    client[kHeldBy] = undefined;
    client.allowHalfOpen = true;
    client.removeListener('data', onHeldData);
    client.removeListener('close', onHeldClose);
    const chunks = this.#heldChunks;
    this.#heldChunks = undefined;
    this.#heldBytes = 0;
    if (chunks === undefined || Array.isArray(chunks)) return chunks;
    return [heldBuffer(chunks)];
  }
}

/** A held chunk as a Buffer again (a short one was kept as a latin1 string). */
function heldBuffer(chunk: string | Buffer): Buffer {
  return typeof chunk === 'string' ? Buffer.from(chunk, 'latin1') : chunk;
}
