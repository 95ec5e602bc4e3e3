import type net from 'node:net';
import { SilenceWheel, type Silent } from './silence-wheel.js';
import { countReadPath } from './tcp-read-path.js';

/**
 * The byte path of one proxied TCP connection. Each direction is a {@link Pump} fed by Node's
 * `onread` option, so Node does not allocate a Buffer per read:
 * - light traffic lands in one buffer shared by every pump of the process and is copied out (only
 *   the bytes read) before the callback returns, so an idle connection holds no read buffer at all;
 * - once a read fills the shared buffer the transfer is bulk, and the pump borrows its own 256 KiB
 *   buffer from a pool and hands each read to the other socket without any copy. While a write
 *   from that buffer is still queued the pump stops reading (the queued bytes live in the buffer),
 *   which is also the backpressure: at most one buffer per direction is ever in flight.
 *
 * Measured on this project's 2-core machine against `a.pipe(b); b.pipe(a)`: roughly a third less
 * proxy CPU per byte in each direction (docs/api.md, "Proxy sockets").
 *
 * This file is longer than 400 lines because the pumps, the relay and the process-wide `onread`
 * buffers share module-private state (the landing buffer, the socket-to-relay symbol, the bytes an
 * endpoint sent before its relay started) that no other module may touch.
 */

/** The shared landing buffer: reads up to this size are copied out; a full one means bulk. */
export const RELAY_SHARED_BUFFER_BYTES = 4096;
/**
 * The buffer a pump borrows for bulk transfer and reads into without copying. 256 KiB rather than
 * 64 KiB: loopback delivers up to this much per read once a transfer is bulk, so each read, write
 * and trip through the event loop moves four times the bytes (on the 2-core machine: 0.36 instead
 * of 0.43 proxy CPU-seconds per GB and 16 instead of 13 Gbit/s with one stream; 1 MiB gained
 * little more for four times the memory per bulk direction).
 */
export const RELAY_LARGE_BUFFER_BYTES = 262_144;
/** Free large buffers kept for reuse across connections (4 MiB); more are left to the GC. */
const LARGE_POOL_LIMIT = 16;

/**
 * Every read of light traffic lands here. That is safe because libuv reads one socket at a time
 * on this thread and the pump copies the bytes out before returning to it.
 */
const shared = Buffer.allocUnsafeSlow(RELAY_SHARED_BUFFER_BYTES);
const largePool: Buffer[] = [];

function takeLarge(): Buffer {
  return largePool.pop() ?? Buffer.allocUnsafeSlow(RELAY_LARGE_BUFFER_BYTES);
}

function giveLarge(buffer: Buffer): void {
  if (buffer !== shared && largePool.length < LARGE_POOL_LIMIT) largePool.push(buffer);
}

/** The relay a socket belongs to, kept on the socket so that shared listeners find it. */
const kRelay = Symbol('userspace-proxy:relay');
/** Bytes a socket read before its relay started, delivered first by `start`. */
const kEarly = Symbol('userspace-proxy:early');
type RelaySocket = net.Socket & { [kRelay]?: TcpRelay; [kEarly]?: Buffer[] | undefined };

/** Set when Node asks for a read buffer while it creates a socket (see {@link connectForRelay}). */
let asked = false;
/** The socket whose read callback ran last: Node asks for its next buffer right after, unbound. */
let justRead: RelaySocket | undefined;

/**
 * The buffer generator of {@link RELAY_ONREAD}. Node calls it as a plain function, without the
 * socket: once while it creates the socket (the relay is not known yet, so the shared buffer it
 * is), then after each read, right after that read's callback returned, which set `justRead`.
 */
function relayBuffer(): Buffer {
  const socket = justRead;
  if (socket === undefined) {
    asked = true;
    return shared;
  }
  justRead = undefined;
  const relay = socket[kRelay];
  return relay === undefined ? shared : relay.pumpOf(socket).buffer;
}

function relayRead(this: RelaySocket, n: number, buf: Uint8Array): boolean {
  const relay = this[kRelay];
  if (relay === undefined) {
    // Read before the relay started (a client's request while its dial is in flight, an endpoint
    // that speaks first): keep the bytes for `start` to deliver first. Reading goes on while they
    // are fewer than one landing buffer (stopping and starting again costs two epoll_ctl(2)
    // calls, and a request is one read), then stops until `start`: at most 8 KiB wait.
    const early = Buffer.allocUnsafe(n);
    (buf as Buffer).copy(early, 0, 0, n);
    const kept = this[kEarly];
    justRead = this;
    if (kept === undefined) {
      this[kEarly] = [early];
      return n < RELAY_SHARED_BUFFER_BYTES;
    }
    kept.push(early);
    return byteLength(kept) < RELAY_SHARED_BUFFER_BYTES;
  }
  const more = relay.pumpOf(this).onRead(this, n, buf as Buffer);
  justRead = this;
  return more;
}

/**
 * The `onread` option of every socket the default TCP proxy socket relays: one object and two
 * functions for the whole process, which find their relay through the socket they are called on,
 * so a connection allocates no closure for its reads. Pass it to `net.connect` (through
 * {@link connectForRelay}) or to {@link adoptAcceptedSocket}, and hand the sockets to
 * {@link TcpRelay.start}.
 */
export const RELAY_ONREAD: net.OnReadOpts = Object.freeze({
  buffer: relayBuffer,
  callback: relayRead,
}) as net.OnReadOpts;

/**
 * Calls `connect(arg)`, which must create its socket with {@link RELAY_ONREAD} as `onread`, and says
 * whether the socket really reads into the relay's buffers (Node asks for a buffer synchronously
 * while it creates a socket with `onread`); false when an injected `connect` dropped the option, and
 * the relay must read the socket through 'data' events.
 */
export function connectForRelay<A>(
  connect: (arg: A) => net.Socket,
  arg: A,
): { socket: net.Socket; usesOnread: boolean } {
  asked = false;
  justRead = undefined;
  const socket = connect(arg);
  const usesOnread = asked;
  asked = false;
  countReadPath(usesOnread ? 'in-place' : 'data-events');
  return { socket, usesOnread };
}

/**
 * Starts reading `socket` (created with, or adopted onto, {@link RELAY_ONREAD}) before its relay
 * exists: what it reads is kept for {@link TcpRelay.start} to deliver first, and reading stops
 * once that reaches {@link RELAY_SHARED_BUFFER_BYTES} (the `onread` callback answers false), so
 * less than twice that waits per socket. A FIN or an error meanwhile is seen by `start` (the
 * socket has ended or is destroyed), as for a socket that was never read early.
 */
export function readEarly(socket: net.Socket): void {
  if (!socket.destroyed) socket.resume();
}

function onRelayError(this: RelaySocket): void {
  this[kRelay]?.onSocketError();
}
function onRelayEnd(this: RelaySocket): void {
  this[kRelay]?.onSocketEnd(this);
}
function onRelayClose(this: RelaySocket): void {
  this[kRelay]?.onSocketClose(this);
}
function onRelayData(this: RelaySocket, chunk: Buffer): void {
  this[kRelay]?.pumpOf(this).onData(chunk);
}
function onRelayDrain(this: RelaySocket): void {
  const relay = this[kRelay];
  // A drain of one socket lets the pump that writes to it read again: the other socket's.
  if (relay !== undefined) relay.pumpOf(relay.peerOf(this)).onDrain();
}

/**
 * One direction of a relay: reads from `src`, writes to `dst`. With {@link RELAY_ONREAD} (or
 * {@link Pump.onread}) passed when `src` was created, Node reads into the pump's buffer; otherwise
 * (a socket made elsewhere) it listens to 'data' and uses write/drain backpressure.
 */
class Pump {
  readonly #relay: TcpRelay;
  #src: net.Socket | undefined;
  #dst: net.Socket | undefined;
  /** Where the next read lands: the shared buffer, or a borrowed large one. */
  #buf: Buffer = shared;
  /** The large buffer a queued write still reads from; reading waits until it completes. */
  #inFlight: Buffer | undefined;
  #dataMode = false;
  #onread: net.OnReadOpts | undefined;
  #writeCallback: ((error?: Error | null) => void) | undefined;
  /**
   * Set whenever Node asks for a read buffer through {@link onread}. A caller clears it, creates the
   * socket, and reads it to learn whether the socket really uses the pump's buffers (an injected
   * `connect` may drop the option). {@link connectForRelay} does the same for {@link RELAY_ONREAD}.
   */
  bufferRequested = false;

  constructor(relay: TcpRelay) {
    this.#relay = relay;
  }

  /** Where Node reads next. */
  get buffer(): Buffer {
    return this.#buf;
  }

  /**
   * An `onread` option bound to this pump, for sockets a caller makes itself; made on first use.
   * The default TCP proxy socket uses the process-wide {@link RELAY_ONREAD} instead.
   */
  get onread(): net.OnReadOpts {
    if (this.#onread === undefined) {
      const pump = this;
      this.#onread = {
        buffer: () => {
          pump.bufferRequested = true;
          return pump.#buf;
        },
        callback(this: unknown, n: number, buf: Uint8Array): boolean {
          return pump.onRead(this as net.Socket, n, buf as Buffer);
        },
      };
    }
    return this.#onread;
  }

  /** Sets where bytes go before the source is known (a backend may answer before `attach`). */
  setDestination(dst: net.Socket): void {
    this.#dst = dst;
  }

  /** Starts pumping from `src`; `usesOnread` says whether `src` reads into the pump's buffers. */
  attach(src: net.Socket, dst: net.Socket, usesOnread: boolean): void {
    this.#src = src;
    this.#dst = dst;
    if (!usesOnread) {
      this.#dataMode = true;
      if (kRelay in src) {
        src.on('data', onRelayData);
        dst.on('drain', onRelayDrain);
      } else {
        // A destination that is not one of the relay's sockets (tests): listeners of its own.
        src.on('data', (chunk: Buffer) => this.onData(chunk));
        dst.on('drain', () => this.onDrain());
      }
    }
  }

  /** Returns a borrowed buffer to the pool, unless a queued write still reads from it. */
  release(): void {
    if (this.#buf !== this.#inFlight) giveLarge(this.#buf);
    this.#buf = shared;
  }

  /** One read of `n` bytes into `buf`; false stops reading until the write completes. */
  onRead(src: net.Socket, n: number, buf: Buffer): boolean {
    this.#src = src;
    this.#relay.touched = true;
    const dst = this.#dst;
    if (dst === undefined || !dst.writable) {
      // Nowhere to put the bytes: the relay is being torn down.
      src.destroy();
      return false;
    }
    if (buf === shared) {
      // Copy out: the next read of any socket reuses `shared`.
      const chunk = Buffer.allocUnsafe(n);
      shared.copy(chunk, 0, 0, n);
      dst.write(chunk, this.#afterWrite());
      if (n === shared.length) this.#buf = takeLarge();
      if (dst.writableLength === 0) return true;
      this.#inFlight = chunk;
      return false;
    }
    dst.write(n === buf.length ? buf : buf.subarray(0, n), this.#afterWrite());
    // Still queued means not yet in the kernel: `buf` must not be read into until it completes.
    const queued = dst.writableLength !== 0;
    if (n < RELAY_SHARED_BUFFER_BYTES) {
      // Bulk is over: give the large buffer back (now, or once its write completes).
      if (!queued) giveLarge(buf);
      this.#buf = shared;
    }
    if (!queued) return true;
    this.#inFlight = buf;
    return false;
  }

  /**
   * The write callback, made on the first write: an idle connection that never sent a byte has
   * none (a closure and its context, about 100 bytes per direction). Made in a method rather than
   * as a class field, which would also give each one a name of its own to store.
   */
  #afterWrite(): (error?: Error | null) => void {
    let callback = this.#writeCallback;
    if (callback === undefined) {
      callback = (error?: Error | null) => this.#written(error);
      this.#writeCallback = callback;
    }
    return callback;
  }

  #written(error?: Error | null): void {
    const done = this.#inFlight;
    if (done === undefined) return;
    this.#inFlight = undefined;
    // A large buffer replaced while its write was queued goes back to the pool only now.
    if (done !== this.#buf && done.length === RELAY_LARGE_BUFFER_BYTES) giveLarge(done);
    const src = this.#src;
    if (!error && src !== undefined && !src.destroyed) src.resume();
  }

  /** A chunk read through 'data' events. */
  onData(chunk: Buffer): void {
    this.#relay.touched = true;
    if (!this.#dst?.write(chunk)) this.#src?.pause();
  }

  /** The destination drained: read again. */
  onDrain(): void {
    if (this.#dataMode) this.#src?.resume();
  }
}

/** Options of a {@link TcpRelay}; both timeouts are off at 0. */
export interface TcpRelayOptions {
  /** Tear the connection down when no byte moved either way for this long. */
  idleTimeoutMs: number;
  /** After the first FIN, reset both sides once no byte has moved for this long. */
  halfCloseTimeoutMs: number;
  /** Called once, when both sockets have closed. */
  onClose?: (relay: TcpRelay) => void;
}

/** Bits of a relay's state (see `TcpRelay.#flags`). */
const HALF_CLOSED = 1;
const CLIENT_CLOSED = 2;
const BACKEND_CLOSED = 4;
const FINISHED = 8;

/**
 * Joins a client socket and a backend socket. Half-close is carried through (a FIN from one side
 * ends writing to the other while the other direction keeps flowing); once one side has sent its
 * FIN, `halfCloseTimeoutMs` of silence resets both, so no proxied connection lingers in
 * FIN_WAIT2/CLOSE_WAIT (kubernetes#17641, #18354). An error or RST on one side resets the other.
 *
 * Built to be small, because an idle connection costs what its objects cost: the sockets' events
 * go to functions shared by every relay (the relay is found through a property of the socket), the
 * options object may be shared by every relay of a socket, the two pumps are made when relaying
 * starts and their write callbacks (the only closures of a relay) on their first write.
 */
export class TcpRelay implements Silent {
  #up: Pump | undefined;
  #down: Pump | undefined;
  /**
   * `performance.now()` at `start`, then at the first wheel tick after a byte was read either way
   * (see {@link touched}); the timeouts measure from it.
   */
  lastActive = 0;
  /** Set on every read instead of reading the clock; a {@link SilenceWheel} tick stamps `lastActive`. */
  touched = false;
  readonly #opts: TcpRelayOptions;
  #client: net.Socket | undefined;
  #backend: net.Socket | undefined;
  #idleWheel: SilenceWheel | undefined;
  #halfCloseWheel: SilenceWheel | undefined;
  /**
   * The relay's four states as bits of one field ({@link HALF_CLOSED}…): one 8-byte slot in every
   * connection instead of four (a held client carries its relay's fields too).
   */
  #flags = 0;
  #startedAt = 0;
  #durationMs = 0;

  /** `opts` is kept, not copied: one object may serve every relay of a proxy socket. */
  constructor(opts: TcpRelayOptions) {
    this.#opts = opts;
  }

  /**
   * Client → backend. Made on first use: a connection that is held, or whose dial fails, never
   * pays for its pumps.
   * @internal the relay's own read callbacks use it.
   */
  get up(): Pump {
    this.#up ??= new Pump(this);
    return this.#up;
  }

  /** Backend → client (made on first use, as {@link up}). @internal */
  get down(): Pump {
    this.#down ??= new Pump(this);
    return this.#down;
  }

  /** Bytes read from the client (sent towards the endpoint). */
  get bytesIn(): number {
    return this.#client?.bytesRead ?? 0;
  }

  /** Bytes written to the client (received from the endpoint). */
  get bytesOut(): number {
    return this.#client?.bytesWritten ?? 0;
  }

  /** Time from `start` until both sockets closed (or until now). */
  get durationMs(): number {
    return this.#flags & FINISHED ? this.#durationMs : performance.now() - this.#startedAt;
  }

  /**
   * Starts relaying two connected sockets. It may come any time after the dial: bytes the endpoint
   * sent first (read through {@link RELAY_ONREAD} before the relay existed) are kept and delivered
   * before anything else, a FIN that came first is carried through, and a socket that is already
   * closed or destroyed ends the relay at once, with `onClose` called (never synchronously from
   * `start`). The client may be paused (pauseOnConnect) or already read early (`readEarly`); it is
   * resumed here.
   *
   * `usesOnread` says which socket was created with {@link RELAY_ONREAD} or this relay's
   * `up.onread` / `down.onread` (or adopted with {@link adoptAcceptedSocket}); others are read
   * through 'data' events. `early` are bytes the client sent before the relay (a held connection):
   * they are written to the backend first.
   */
  start(
    client: net.Socket,
    backend: net.Socket,
    usesOnread: { client: boolean; backend: boolean } = { client: false, backend: false },
    early?: readonly Buffer[],
  ): void {
    this.#client = client;
    this.#backend = backend;
    (client as RelaySocket)[kRelay] = this;
    (backend as RelaySocket)[kRelay] = this;
    this.#startedAt = performance.now();
    this.lastActive = this.#startedAt;
    this.up.attach(client, backend, usesOnread.client);
    this.down.attach(backend, client, usesOnread.backend);
    client.removeListener('error', ignoreError);
    client.on('error', onRelayError);
    backend.on('error', onRelayError);
    client.on('end', onRelayEnd);
    backend.on('end', onRelayEnd);
    client.on('close', onRelayClose);
    backend.on('close', onRelayClose);
    if (this.#opts.idleTimeoutMs > 0) {
      this.#idleWheel = SilenceWheel.for(this.#opts.idleTimeoutMs);
      this.#idleWheel.add(this, this.#startedAt);
    }
    // A 'close' that came before the listeners above will never come again.
    if (client.closed) this.#flags |= CLIENT_CLOSED;
    if (backend.closed) this.#flags |= BACKEND_CLOSED;
    if (client.destroyed || backend.destroyed) {
      this.#reset();
      if (client.closed && backend.closed) queueMicrotask(() => this.#finish());
      return;
    }
    if (early !== undefined) for (const chunk of early) backend.write(chunk);
    const sent = (client as RelaySocket)[kEarly];
    if (sent !== undefined) {
      (client as RelaySocket)[kEarly] = undefined;
      for (const chunk of sent) backend.write(chunk);
    }
    const answered = (backend as RelaySocket)[kEarly];
    if (answered !== undefined) {
      (backend as RelaySocket)[kEarly] = undefined;
      for (const chunk of answered) client.write(chunk);
    }
    // An 'end' that came before the listeners: carry the FIN through now.
    if (client.readableEnded) this.onSocketEnd(client);
    if (backend.readableEnded) this.onSocketEnd(backend);
    client.resume();
    if (answered !== undefined || backend.isPaused()) backend.resume();
  }

  /** Resets both sockets now (an accept policy's `refuse` of a relayed connection). */
  destroy(): void {
    this.#reset();
  }

  /** Returns the read buffers of a relay that will never start (its dial failed). */
  abandon(): void {
    if (this.#startedAt !== 0) return;
    this.#up?.release();
    this.#down?.release();
  }

  /** Called by a wheel when the relay has been silent for its timeout. */
  expire(wheel: SilenceWheel): void {
    wheel.delete(this);
    if (this.#flags & HALF_CLOSED) {
      this.#reset();
    } else {
      this.#client?.destroy();
      this.#backend?.destroy();
    }
  }

  /** The pump that reads `socket`. @internal */
  pumpOf(socket: net.Socket): Pump {
    return socket === this.#backend ? this.down : this.up;
  }

  /** The relay's other socket. */
  peerOf(socket: net.Socket): net.Socket {
    return (socket === this.#client ? this.#backend : this.#client) as net.Socket;
  }

  /** An error or RST on either socket. */
  onSocketError(): void {
    this.#reset();
  }

  /** A FIN from `socket`: end writing to the other one. */
  onSocketEnd(socket: net.Socket): void {
    this.#halfClose();
    const other = this.peerOf(socket);
    if (other !== undefined && !other.destroyed) other.end();
  }

  /** `socket` closed. */
  onSocketClose(socket: net.Socket): void {
    if (socket === this.#client) {
      this.#flags |= CLIENT_CLOSED;
      this.#afterClose(socket, this.#backend, (this.#flags & BACKEND_CLOSED) !== 0);
    } else {
      this.#flags |= BACKEND_CLOSED;
      this.#afterClose(socket, this.#client, (this.#flags & CLIENT_CLOSED) !== 0);
    }
  }

  /** Resets both sockets (RST), for an error or a timeout after a half-close. */
  #reset(): void {
    resetSocket(this.#client);
    resetSocket(this.#backend);
  }

  #halfClose(): void {
    if (this.#flags & HALF_CLOSED) return;
    this.#flags |= HALF_CLOSED;
    const timeout = this.#opts.halfCloseTimeoutMs;
    if (timeout > 0 && (this.#flags & FINISHED) === 0) {
      // Joining the wheel stamps `lastActive`: the timeout runs from the FIN.
      this.#halfCloseWheel = SilenceWheel.for(timeout);
      this.#halfCloseWheel.add(this);
    }
  }

  #afterClose(closed: net.Socket, other: net.Socket | undefined, otherClosed: boolean): void {
    if (otherClosed) {
      this.#finish();
      return;
    }
    // A side that closed without both FINs was cut off: nothing more can flow, so end the other.
    // After a clean close the other side only has to flush; the half-close timeout bounds that.
    if (!(closed.readableEnded && closed.writableFinished)) {
      if (closed.errored) resetSocket(other);
      else other?.destroy();
    }
  }

  #finish(): void {
    if (this.#flags & FINISHED) return;
    this.#flags |= FINISHED;
    this.#durationMs = performance.now() - this.#startedAt;
    this.#idleWheel?.delete(this);
    this.#halfCloseWheel?.delete(this);
    this.#up?.release();
    this.#down?.release();
    this.#opts.onClose?.(this);
  }
}

function byteLength(chunks: readonly Buffer[]): number {
  let n = 0;
  for (const chunk of chunks) n += chunk.length;
  return n;
}

/** The error listener a caller may put on a client while it dials; `start` replaces it. */
export function ignoreError(): void {}

/** Closes with an RST when the socket can still send one, so the peer learns data may be lost. */
function resetSocket(socket: net.Socket | undefined): void {
  if (socket === undefined || socket.destroyed) return;
  const open = (socket as unknown as { _handle?: unknown })._handle != null;
  if (socket.connecting || !open) socket.destroy();
  else socket.resetAndDestroy();
}
