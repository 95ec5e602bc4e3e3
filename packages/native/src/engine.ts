/**
 * One helper process per factory, shared by its sockets: starts it on the first socket, routes the
 * helper's events to sockets (by listener id) and connections (by connection id), turns dial
 * attempts into the `net.Socket`-shaped objects core's dial schedule drives, stops the helper when
 * nothing uses it, and restarts it with back-off when it dies (its sockets listen again).
 */
import type net from 'node:net';
import type { Logger } from '@userspace-proxy/core';
import { joinHostPort } from '@userspace-proxy/core/sockets';
import { errnoError, NativeHelperError } from './errors.js';
import { HelperAbort } from './helper-abort.js';
import type { Picks } from './helper-process.js';
import { HelperSupervisor, relistenAll } from './helper-supervisor.js';
import { DialAttempt, type EngineSocket, NativeConnection } from './native-connection.js';
import { RelayHelper } from './relay-helper.js';
import {
  type CloseHow,
  type CloseMode,
  errnoName,
  type RelayHelperEvents,
  type RelayHelperOptions,
  type RelayLimits,
} from './relay-protocol.js';

/** Counters of one engine (one factory's helper). */
export interface NativeTcpCounters {
  /** Helper processes started (1 + restarts). */
  helperStarts: number;
  /** Helper processes that died without being asked to. */
  helperExits: number;
  /**
   * Listens again after a restart that failed (the port taken meanwhile): the first and each
   * retry (retried with back-off while the socket is open).
   */
  relistenFailures: number;
  /** Connections the helper accepted. */
  accepted: number;
  /** Connections closed at accept because the helper was at `maxHelperConnections`. */
  refusedAtCap: number;
  /** Accept errors (EMFILE…) after which a helper thread paused accepting. */
  acceptErrors: number;
  /** Dial attempts Node asked the helper for ('D' frames: every attempt of the per-accept path, retries). */
  dialsAsked: number;
  /** Connections the helper dialled at once from a pick made ahead (no 'D'). */
  dialsAhead: number;
  /**
   * Writes of command frames to the helper's pipes: one per pipe per event-loop turn that had
   * frames for it, however many dials, closes and holds that turn asked for.
   */
  commandWrites: number;
}

/** Options of the engine (withNativeTcp's, resolved). */
export interface EngineOptions extends RelayHelperOptions {
  readonly limits: RelayLimits;
  /** Timeout of each dial attempt, in order; the helper enforces them. */
  readonly dialTimeoutsMs: readonly number[];
  /** First restart delay, ms, doubling up to 5 s. */
  readonly restartBackoffMs: number;
  readonly logger?: Logger;
}

/** See the module comment. */
export class NativeTcpEngine implements RelayHelperEvents {
  readonly counters: NativeTcpCounters = {
    helperStarts: 0,
    helperExits: 0,
    relistenFailures: 0,
    accepted: 0,
    refusedAtCap: 0,
    acceptErrors: 0,
    dialsAsked: 0,
    dialsAhead: 0,
    commandWrites: 0,
  };
  readonly #opts: EngineOptions;
  readonly #life: HelperSupervisor<RelayHelper>;
  readonly #sockets = new Map<number, EngineSocket>();
  /** Where each listener listens (its bound port once known), to listen again after a restart. */
  readonly #where = new Map<number, { address: string; port: number; backlog: number }>();
  readonly #conns = new Map<number, NativeConnection>();
  #nextListener = 1;
  #abort = new HelperAbort();

  constructor(opts: EngineOptions) {
    this.#opts = opts;
    this.#life = new HelperSupervisor({
      protocol: 'TCP',
      start: () => RelayHelper.start(opts, this),
      started: (h) => h.setLimits(opts.limits),
      restartBackoffMs: opts.restartBackoffMs,
      counters: this.counters,
      wanted: () => this.#sockets.size > 0,
      relisten: (h) => this.#relisten(h),
      logger: opts.logger,
    });
  }

  /** The running helper. */
  get #helper(): RelayHelper | undefined {
    return this.#life.helper;
  }

  /** Aborted when the helper dies: every dial in flight ends at once. */
  get signal(): AbortSignal {
    return this.#abort as unknown as AbortSignal;
  }

  /** The running helper's process id. */
  get helperPid(): number | undefined {
    return this.#helper?.pid;
  }

  /** Threads the running helper has (0 when none runs). */
  get helperThreads(): number {
    return this.#helper?.threads ?? 0;
  }

  /** Connections the helper carries for every socket. */
  get connections(): number {
    return this.#conns.size;
  }

  /** Listens for `socket`; resolves with its listener id and bound port. */
  async listen(
    socket: EngineSocket,
    address: string,
    port: number,
    backlog: number,
    logger: Logger,
  ): Promise<{ listener: number; port: number }> {
    const h = await this.#life.ensure(logger);
    const listener = this.#nextListener++;
    // Registered first: the first 'a' frame may come in the same chunk as the 'l'.
    this.#sockets.set(listener, socket);
    const r = await h.listen(listener, address, port, backlog);
    if (r.errno !== 0) {
      this.#sockets.delete(listener);
      this.#where.delete(listener);
      this.#stopIfIdle();
      throw r.errno < 0
        ? new NativeHelperError('exited while listening')
        : errnoError('listen', errnoName(r.errno), `${address}:${port}`);
    }
    this.#where.set(listener, { address, port: r.port, backlog });
    return { listener, port: r.port };
  }

  /** Stops a listener (resolves once it is closed); its connections carry on. */
  async closeListener(listener: number): Promise<void> {
    if (!this.#sockets.delete(listener)) return;
    this.#where.delete(listener);
    const h = this.#helper;
    if (h !== undefined) await h.closeListener(listener);
    this.#stopIfIdle();
  }

  /** One dial attempt of `conn` (core's ConnectFn). Throws when no helper runs. */
  attempt(conn: NativeConnection, target: { host: string; port: number }): net.Socket {
    const h = this.#helper;
    if (h === undefined || h.isExited || conn.state === 'closed') {
      throw new NativeHelperError('not running');
    }
    const attempt = new DialAttempt(this, conn, ++conn.attempts);
    conn.pending = attempt;
    conn.state = 'dialling';
    const timeouts = this.#opts.dialTimeoutsMs;
    const timeoutMs = timeouts[Math.min(attempt.attempt, timeouts.length) - 1] ?? 0;
    this.counters.dialsAsked++;
    h.dial(conn.id, attempt.attempt, timeoutMs, target.host, target.port);
    // The dial schedule uses on/removeListener/destroy only: an EventEmitter stands for the socket.
    return attempt as unknown as net.Socket;
  }

  /** @internal a DialAttempt given up on. */
  cancel(conn: NativeConnection, attempt: number): void {
    if (conn.state !== 'closed') this.#helper?.cancel(conn.id, attempt);
  }

  /** Closes a connection (see {@link CloseMode}); its `onClosed` follows. */
  closeConnection(conn: NativeConnection, mode: CloseMode): void {
    if (conn.state === 'closed') return;
    this.#helper?.close(conn.id, mode);
  }

  /** Holds a connection for its socket's accept policy, reading at most `maxBytes` of it. */
  hold(conn: NativeConnection, maxBytes: number): void {
    if (conn.state !== 'closed') this.#helper?.hold(conn.id, maxBytes);
  }

  /** Resets every connection of `socket`. */
  abortAll(socket: EngineSocket): void {
    for (const conn of this.#conns.values())
      if (conn.socket === socket) this.closeConnection(conn, 'reset');
  }

  /** Stops the helper (every connection it carries ends) and refuses new sockets. */
  close(): Promise<void> {
    return this.#life.close();
  }

  #stopIfIdle(): void {
    this.#life.stopIfIdle(this.#sockets.size === 0 && this.#conns.size === 0);
  }

  // ---- RelayHelperEvents ----

  accepted(
    id: number,
    listener: number,
    address: string,
    port: number,
    pickEpoch: number,
    pickHost: string,
    pickPort: number,
  ): void {
    const socket = this.#sockets.get(listener);
    this.counters.accepted++;
    if (socket === undefined) {
      this.#helper?.close(id, 'reset'); // a listener closed while this connection was queued
      return;
    }
    const conn = new NativeConnection(id, socket, address, port);
    if (pickEpoch !== 0) {
      this.counters.dialsAhead++;
      conn.pickEpoch = pickEpoch;
      conn.attempts = 1;
      conn.state = 'dialling';
      conn.endpoint = joinHostPort(pickHost, pickPort);
    }
    this.#conns.set(id, conn);
    socket.onAccepted(conn);
  }

  /** Sends picks made ahead for one helper thread's accepts on `listener` (see RelayHelper.picks). */
  picks(listener: number, thread: number, epoch: number, picks: Picks): void {
    const h = this.#helper;
    if (h === undefined || h.isExited || !this.#sockets.has(listener)) return;
    h.picks(listener, thread, epoch, this.#opts.dialTimeoutsMs[0] ?? 0, picks);
  }

  picksTaken(listener: number, thread: number, epoch: number): void {
    this.#sockets.get(listener)?.onPicksTaken(thread, epoch);
  }

  refused(listener: number): void {
    this.counters.refusedAtCap++;
    this.#sockets.get(listener)?.onRefusedAtCap();
  }

  acceptError(listener: number, errno: number): void {
    this.counters.acceptErrors++;
    this.#sockets.get(listener)?.onAcceptError(errnoError('accept', errnoName(errno), ''));
  }

  dialed(id: number, attempt: number, errno: number): void {
    const conn = this.#conns.get(id);
    if (conn !== undefined && conn.pickEpoch !== 0 && attempt === 1) {
      conn.pickEpoch = 0;
      conn.state = errno === 0 ? 'relaying' : 'new';
      conn.socket.onPickDialed(conn, errno);
      return;
    }
    const pending = conn?.pending;
    if (conn === undefined || pending === undefined || pending.attempt !== attempt) return;
    pending.settle(
      errno === 0
        ? undefined
        : errnoError('connect', errnoName(errno), `(attempt ${attempt} of a native connection)`),
    );
  }

  wrote(): void {
    this.counters.commandWrites++;
  }

  held(id: number, bytes: number): void {
    const conn = this.#conns.get(id);
    if (conn !== undefined) conn.held = bytes;
  }

  closed(id: number, bytesIn: number, bytesOut: number, how: CloseHow): void {
    const conn = this.#conns.get(id);
    if (conn === undefined) return;
    this.#conns.delete(id);
    this.#end(conn, bytesIn, bytesOut, how);
    this.#stopIfIdle();
  }

  #end(conn: NativeConnection, bytesIn: number, bytesOut: number, how: CloseHow): void {
    conn.bytesIn = bytesIn;
    conn.bytesOut = bytesOut;
    const pending = conn.pending;
    conn.state = 'closed';
    pending?.settle(errnoError('connect', 'ECONNRESET', '(the connection closed while dialling)'));
    conn.socket.onClosed(conn, how);
  }

  exited(why: string): void {
    // The helper that exited: the current one, unless it was stopped on purpose.
    const how = this.#life.exited();
    if (how === 'replaced') return;
    this.#abort.abort(new NativeHelperError(why));
    this.#abort = new HelperAbort();
    const conns = [...this.#conns.values()];
    this.#conns.clear();
    for (const conn of conns) this.#end(conn, conn.bytesIn, conn.bytesOut, 'helper-exit');
    if (how === 'stopped' || this.#life.closed) return;
    this.counters.helperExits++;
    const error = new NativeHelperError(`${why}; its listeners are down until it restarts`);
    for (const socket of this.#sockets.values()) socket.onHelperExit(error);
    this.#life.scheduleRestart(why, this.#sockets.size);
  }

  /** Listens again for every socket on a restarted helper; false when it died meanwhile. */
  #relisten(h: RelayHelper): Promise<boolean> {
    return relistenAll(
      h,
      this.#sockets,
      this.#where,
      (l, w) => h.listen(l, w.address, w.port, w.backlog),
      (l) => this.#sockets.has(l),
      (errno, w) => errnoError('listen', errnoName(errno), `${w.address}:${w.port}`),
      { firstMs: this.#opts.restartBackoffMs, counters: this.counters },
    );
  }
}
