/**
 * One UDP helper process per factory, shared by its sockets: starts it with the first socket,
 * routes its events to sockets (by listener id and session id), stops it when no socket is left,
 * and restarts it with back-off when it dies (its sockets bind again, on the same ports).
 */
import type { Logger } from '@userspace-proxy/core';
import { errnoError, NativeHelperError } from './errors.js';
import type { Picks } from './helper-process.js';
import { HelperSupervisor, relistenAll } from './helper-supervisor.js';
import { errnoName } from './relay-protocol.js';
import { UdpHelper } from './udp-helper.js';
import type {
  UdpCloseReason,
  UdpHelperEvents,
  UdpHelperOptions,
  UdpListenSpec,
  UdpSessionTotals,
} from './udp-protocol.js';

/** Counters of one UDP engine (one factory's helper). */
export interface NativeUdpCounters {
  /** Helper processes started (1 + restarts). */
  helperStarts: number;
  /** Helper processes that died without being asked to. */
  helperExits: number;
  /**
   * Listens again after a restart that failed (the port taken meanwhile): the first and each
   * retry (retried with back-off while the socket is open).
   */
  relistenFailures: number;
  /** Sessions the helper opened with an endpoint picked ahead (no round trip to Node). */
  sessionsAhead: number;
  /** New clients the helper asked Node about ('n' frames). */
  sessionsAsked: number;
  /** Datagrams dropped by the helper at the session caps. */
  droppedAtCap: number;
  /** Datagrams dropped by the helper because a new session's queue was full. */
  droppedQueueFull: number;
}

/** What the engine tells one socket; NativeUdpProxySocket implements it. */
export interface UdpEngineSocket {
  onAsked(session: number, address: string, port: number): void;
  onOpened(session: number, epoch: number, address: string, port: number, endpoint: string): void;
  onClosed(session: number, totals: UdpSessionTotals, reason: UdpCloseReason, errno: number): void;
  onDropped(atCap: number, queueFull: number): void;
  onPicksTaken(thread: number, epoch: number): void;
  onHelperExit(error: NativeHelperError): void;
  /** A listen after a restart: undefined when it worked; `attempt` counts the retries from 1. */
  onRelisten(error: unknown, attempt?: number): void;
}

/** Options of the engine (withNativeUdp's, resolved). */
export interface UdpEngineOptions extends UdpHelperOptions {
  /** First restart delay, ms, doubling up to 5 s. */
  readonly restartBackoffMs: number;
}

/** See the module comment. */
export class NativeUdpEngine implements UdpHelperEvents {
  readonly counters: NativeUdpCounters = {
    helperStarts: 0,
    helperExits: 0,
    relistenFailures: 0,
    sessionsAhead: 0,
    sessionsAsked: 0,
    droppedAtCap: 0,
    droppedQueueFull: 0,
  };
  readonly #life: HelperSupervisor<UdpHelper>;
  readonly #sockets = new Map<number, UdpEngineSocket>();
  readonly #where = new Map<number, UdpListenSpec>();
  /** Session id -> its socket's listener. */
  readonly #sessions = new Map<number, number>();
  #nextListener = 1;
  readonly #restartBackoffMs: number;

  constructor(opts: UdpEngineOptions) {
    this.#restartBackoffMs = opts.restartBackoffMs;
    this.#life = new HelperSupervisor({
      protocol: 'UDP',
      start: () => UdpHelper.start(opts, this),
      restartBackoffMs: opts.restartBackoffMs,
      counters: this.counters,
      wanted: () => this.#sockets.size > 0,
      relisten: (h) => this.#relisten(h),
    });
  }

  /** The running helper. */
  get #helper(): UdpHelper | undefined {
    return this.#life.helper;
  }

  /** The running helper's process id. */
  get helperPid(): number | undefined {
    return this.#helper?.pid;
  }

  /** Threads the running helper has (0 when none runs). */
  get helperThreads(): number {
    return this.#helper?.threads ?? 0;
  }

  /** Binds for `socket` on every helper thread; resolves with its listener id and bound port. */
  async listen(
    socket: UdpEngineSocket,
    spec: UdpListenSpec,
    logger: Logger,
  ): Promise<{ listener: number; port: number }> {
    const h = await this.#life.ensure(logger);
    const listener = this.#nextListener++;
    this.#sockets.set(listener, socket);
    const r = await h.listen(listener, spec);
    if (r.errno !== 0) {
      this.#sockets.delete(listener);
      this.#stopIfIdle();
      throw r.errno < 0
        ? new NativeHelperError('exited while binding', { protocol: 'UDP' })
        : errnoError('bind', errnoName(r.errno), `${spec.address}:${spec.port}`);
    }
    this.#where.set(listener, { ...spec, port: r.port });
    return { listener, port: r.port };
  }

  /** Closes a listener (its sessions end first); resolves once every thread's socket is closed. */
  async closeListener(listener: number): Promise<void> {
    if (!this.#where.has(listener) && !this.#sockets.has(listener)) return;
    this.#where.delete(listener);
    const h = this.#helper;
    if (h !== undefined && !h.isExited) await h.closeListener(listener);
    this.#sockets.delete(listener);
    this.#stopIfIdle();
  }

  /** Sets a listener's idle timeout (kept for a restart). */
  setIdle(listener: number, idleMs: number): void {
    const where = this.#where.get(listener);
    if (where === undefined) return;
    this.#where.set(listener, { ...where, idleMs });
    this.#helper?.setIdle(listener, idleMs);
  }

  /**
   * Node's verdict on an asked session (undefined: drop it). Ignored for a session this helper no
   * longer has: one asked of a helper that died since (the socket may still hold it, waiting for
   * its proxyLoop) must not reach the restarted helper, whose session ids start again.
   */
  verdict(session: number, target: { host: string; port: number } | undefined): void {
    if (this.#sessions.has(session)) this.#helper?.verdict(session, target);
  }

  /** Ends a session; the socket hears `onClosed`. Ignored, as a verdict, for one already gone. */
  closeSession(session: number, reason: 'closed' | 'endpoint-removed'): void {
    if (this.#sessions.has(session)) this.#helper?.close(session, reason);
  }

  /** See PicksAhead: endpoints for one thread's new sessions. */
  picks(listener: number, thread: number, epoch: number, picks: Picks): void {
    const h = this.#helper;
    if (h === undefined || h.isExited || !this.#where.has(listener)) return;
    h.picks(listener, thread, epoch, picks);
  }

  /** Stops the helper (every session ends) and refuses new sockets. */
  close(): Promise<void> {
    return this.#life.close();
  }

  #stopIfIdle(): void {
    this.#life.stopIfIdle(this.#sockets.size === 0);
  }

  // ---- UdpHelperEvents ----

  asked(session: number, listener: number, address: string, port: number): void {
    this.counters.sessionsAsked++;
    const socket = this.#sockets.get(listener);
    if (socket === undefined) {
      this.#helper?.verdict(session, undefined);
      return;
    }
    this.#sessions.set(session, listener);
    socket.onAsked(session, address, port);
  }

  opened(
    session: number,
    listener: number,
    epoch: number,
    address: string,
    port: number,
    endpoint: string,
  ): void {
    this.counters.sessionsAhead++;
    const socket = this.#sockets.get(listener);
    if (socket === undefined) {
      this.#helper?.close(session, 'closed');
      return;
    }
    this.#sessions.set(session, listener);
    socket.onOpened(session, epoch, address, port, endpoint);
  }

  closed(session: number, totals: UdpSessionTotals, reason: UdpCloseReason, errno: number): void {
    const listener = this.#sessions.get(session);
    if (listener === undefined) return;
    this.#sessions.delete(session);
    this.#sockets.get(listener)?.onClosed(session, totals, reason, errno);
  }

  dropped(listener: number, atCap: number, queueFull: number): void {
    this.counters.droppedAtCap += atCap;
    this.counters.droppedQueueFull += queueFull;
    this.#sockets.get(listener)?.onDropped(atCap, queueFull);
  }

  picksTaken(listener: number, thread: number, epoch: number): void {
    this.#sockets.get(listener)?.onPicksTaken(thread, epoch);
  }

  exited(why: string): void {
    const how = this.#life.exited();
    if (how === 'replaced') return;
    const sessions = [...this.#sessions];
    this.#sessions.clear();
    const none = { datagramsIn: 0, bytesIn: 0, datagramsOut: 0, bytesOut: 0, dropped: 0 };
    for (const [session, listener] of sessions) {
      this.#sockets.get(listener)?.onClosed(session, none, 'helper-exit', 0);
    }
    if (how === 'stopped' || this.#life.closed) return;
    this.counters.helperExits++;
    const error = new NativeHelperError(`${why}; its sockets are down until it restarts`, {
      protocol: 'UDP',
    });
    for (const socket of this.#sockets.values()) socket.onHelperExit(error);
    this.#life.scheduleRestart(why, this.#sockets.size);
  }

  /** Binds again for every socket on a restarted helper; false when it died meanwhile. */
  #relisten(h: UdpHelper): Promise<boolean> {
    return relistenAll(
      h,
      this.#sockets,
      this.#where,
      (l, w) => h.listen(l, w),
      (l) => this.#where.has(l),
      (errno, w) => errnoError('bind', errnoName(errno), `${w.address}:${w.port}`),
      { firstMs: this.#restartBackoffMs, counters: this.counters },
    );
  }
}
