// Longer than 400 lines because one class holds the listener as core's TCP socket does: its accept
// path (limits, source ranges, the accept policy), the dial schedule, the fast path of picks made
// ahead, and the engine's events; split, each part would reach into the others' state.
/**
 * The native TCP proxy socket: the helper process accepts and relays (epoll, splice(2), every
 * core); Node keeps every decision of core's TCP socket. Each accepted connection runs core's dial
 * schedule (`tryConnectEndpoints`: the load balancer's pick, ClientIP affinity, per-attempt
 * timeouts, the affinity reset after a failure) with a connect function that asks the helper to
 * dial; per-socket connection limits, source ranges and refusals are checked here and published on
 * the same diagnostics channels as the TCP socket's. Built on core's public surface only.
 */
import net from 'node:net';
import {
  type AcceptPolicy,
  type AcceptPolicyFactory,
  type AcceptVerdict,
  type Addr,
  type Logger,
  PROXY_EVERY_CONNECTION,
  type ProxySocket,
  type ProxySocketContext,
  RoundRobinLoadBalancer,
  type ServiceInfo,
  servicePortNameString,
} from '@userspace-proxy/core';
import {
  type ConnectionCloseMessage,
  type ConnectionOpenMessage,
  channels,
  type RefusedMessage,
} from '@userspace-proxy/core/diagnostics';
import {
  type DialOptions,
  dialEndpoints,
  isNoEndpointsError,
  joinHostPort,
  LogLimiter,
  PROXY_PROTOCOL_ANNOTATION,
  refusalReason,
  sourceRangeCheck,
} from '@userspace-proxy/core/sockets';
import type { NativeTcpEngine } from './engine.js';
import { errnoError, type NativeHelperError, NativeUnsupportedError } from './errors.js';
import { relistenAttempt } from './helper-supervisor.js';
import {
  type EngineSocket,
  type NativeConnection,
  nodeTimeouts,
  type SocketSettings,
} from './native-connection.js';
import { listenAnyFamily, SocketDrain } from './native-socket-life.js';
import { PicksAhead, type PicksAheadState } from './picks-ahead.js';
import { type CloseHow, connThread, errnoName } from './relay-protocol.js';
import { SocketForwarder } from './socket-forwarder.js';

/** See the module comment. Made by {@link withNativeTcp}. */
export class NativeTcpProxySocket implements ProxySocket, EngineSocket {
  readonly #ctx: ProxySocketContext;
  readonly #engine: NativeTcpEngine;
  readonly #listener: number;
  readonly #addr: Addr;
  readonly #opts: SocketSettings;
  readonly #allowed: ((address: string | undefined) => boolean) | undefined;
  readonly #log: Logger;
  /** Core's accept policy: proxy now, hold (the helper reads the client), or refuse. */
  readonly #policy: AcceptPolicy;
  readonly #refusalLog = new LogLimiter();
  readonly #name: string;
  /** The dial schedule's timers in Node: the helper's timeouts plus a grace (a safety net). */
  readonly #nodeTimeoutsMs: readonly number[];
  #info: ServiceInfo | undefined;
  /** Endpoints picked ahead for the helper (the fast path), when this Service allows it. */
  #ahead: PicksAhead | undefined;
  #unwatchEndpoints: (() => void) | undefined;
  /** The dial schedule's options, shared by this socket's dials (see #dial). */
  #dialOpts: DialOptions | undefined;
  #pending: NativeConnection[] = [];
  #closed = false;
  #closing: Promise<void> | undefined;
  #active = 0;
  readonly #drain = new SocketDrain();

  /** Opens the listener through the engine; see {@link withNativeTcp}. */
  static async open(
    ctx: ProxySocketContext,
    engine: NativeTcpEngine,
    opts: SocketSettings,
    backlog: number,
    acceptPolicy?: AcceptPolicyFactory,
  ): Promise<NativeTcpProxySocket> {
    if (ctx.service?.metadata?.annotations?.[PROXY_PROTOCOL_ANNOTATION] !== undefined) {
      throw new NativeUnsupportedError(
        `the ${PROXY_PROTOCOL_ANNOTATION} annotation`,
        'the helper writes no PROXY header; serve this Service with the default TCP socket',
      );
    }
    // The engine routes accepts to the socket as soon as it listens: a forwarder until it exists.
    const forwarder = new SocketForwarder(ctx.logger);
    const { address, r } = await listenAnyFamily(ctx, (a) =>
      engine.listen(forwarder, a, ctx.port, backlog, ctx.logger),
    );
    let policy: AcceptPolicy = PROXY_EVERY_CONNECTION;
    if (acceptPolicy !== undefined) {
      try {
        policy = acceptPolicy(ctx);
      } catch (error) {
        await engine.closeListener(r.listener);
        for (const c of forwarder.early ?? []) engine.closeConnection(c, 'fin');
        throw error;
      }
    }
    const socket = new NativeTcpProxySocket(ctx, engine, r.listener, address, r.port, opts, policy);
    forwarder.socket = socket;
    const early = forwarder.early ?? [];
    forwarder.early = undefined;
    for (const c of early) socket.onAccepted(c);
    return socket;
  }

  private constructor(
    ctx: ProxySocketContext,
    engine: NativeTcpEngine,
    listener: number,
    address: string,
    port: number,
    opts: SocketSettings,
    policy: AcceptPolicy,
  ) {
    this.#ctx = ctx;
    this.#policy = policy;
    this.#engine = engine;
    this.#listener = listener;
    this.#addr = { address, port, family: net.isIPv6(address) ? 'IPv6' : 'IPv4' };
    this.#opts = opts;
    this.#allowed = sourceRangeCheck(ctx.allowedSources);
    this.#log = ctx.logger;
    this.#name = servicePortNameString(ctx.servicePort);
    this.#nodeTimeoutsMs = nodeTimeouts(opts.dialTimeoutsMs);
  }

  /** @internal EngineSocket */
  get logger(): Logger {
    return this.#log;
  }

  addr(): Addr {
    return { ...this.#addr };
  }

  listenPort(): number {
    return this.#ctx.port;
  }

  proxyLoop(info: ServiceInfo): Promise<void> {
    if (this.#info !== undefined || this.#closed) return this.#drain.loopDone;
    this.#info = info;
    const pending = this.#pending;
    this.#pending = [];
    for (const conn of pending) if (conn.state !== 'closed') this.#handle(conn);
    if (this.#picksAheadApply(info)) {
      const ahead = new PicksAhead(
        this.#engine,
        this.#listener,
        this.#ctx.servicePort,
        this.#ctx.loadBalancer,
      );
      this.#ahead = ahead;
      this.#unwatchEndpoints = this.#ctx.onEndpointsChanged(() => {
        if (this.#info?.sessionAffinityType === 'ClientIP') ahead.stop();
        else ahead.refill();
      });
      ahead.refill();
    }
    return this.#drain.loopDone;
  }

  /**
   * Picks made ahead stand for the per-accept pick only when the pick cannot depend on the client
   * (no session affinity, core's round-robin balancer) and when no check at accept may refuse the
   * client (source ranges, a per-socket connection limit, an accept policy): the helper dials
   * before Node sees it.
   */
  #picksAheadApply(info: ServiceInfo): boolean {
    return (
      this.#policy === PROXY_EVERY_CONNECTION &&
      info.sessionAffinityType !== 'ClientIP' &&
      this.#ctx.loadBalancer instanceof RoundRobinLoadBalancer &&
      this.#allowed === undefined &&
      this.#opts.maxConnections === 0
    );
  }

  close(): Promise<void> {
    if (this.#closing !== undefined) return this.#closing;
    this.#closed = true;
    this.#unwatchEndpoints?.();
    this.#closing = this.#engine.closeListener(this.#listener);
    for (const conn of this.#pending) this.#engine.closeConnection(conn, 'fin');
    this.#pending = [];
    // Held connections carry on: the policy closes them (as core's socket leaves them to it).
    try {
      this.#policy.close?.();
    } catch (error) {
      this.#log.error(`the accept policy of ${this.#name} failed to close`, error);
    }
    this.#drain.endLoop();
    this.#checkIdle();
    return this.#closing;
  }

  activeConnections(): number {
    return this.#active;
  }

  idle(): Promise<void> {
    return this.#drain.idle(this.#closed && this.#active === 0);
  }

  abortConnections(): void {
    this.#engine.abortAll(this);
  }

  /** @internal EngineSocket */
  onAccepted(conn: NativeConnection): void {
    this.#active++;
    if (conn.pickEpoch !== 0) this.#ahead?.used(connThread(conn.id), conn.pickEpoch);
    else this.#ahead?.missed(connThread(conn.id));
    if (this.#closed) {
      this.#engine.closeConnection(conn, 'fin');
      return;
    }
    if (this.#info === undefined) {
      // Accepted before proxyLoop: wait, as the TCP socket's queue does (bounded the same way).
      if (this.#pending.length < 64) this.#pending.push(conn);
      else this.#engine.closeConnection(conn, 'fin');
      return;
    }
    this.#handle(conn);
  }

  #handle(conn: NativeConnection): void {
    if (this.#info?.isAlive() === false) {
      this.#engine.closeConnection(conn, 'fin');
      void this.close();
      return;
    }
    if (this.#allowed !== undefined && !this.#allowed(conn.remoteAddress)) {
      this.#publishRefused('source-range');
      this.#engine.closeConnection(conn, 'fin');
      return;
    }
    const max = this.#opts.maxConnections;
    if (max > 0 && this.#active > max) {
      this.#publishRefused('connection-limit');
      this.#engine.closeConnection(conn, 'fin');
      return;
    }
    if (conn.pickEpoch !== 0) return; // the helper dials a pick made ahead: onPickDialed follows
    const verdict = this.#policy === PROXY_EVERY_CONNECTION ? 'proxy' : this.#verdict(conn);
    if (verdict === 'proxy') {
      this.#dial(conn, undefined);
    } else if (verdict === 'hold') {
      conn.state = 'held';
      this.#engine.hold(conn, this.#opts.holdBufferBytes);
    } else {
      conn.refuse();
    }
  }

  #verdict(conn: NativeConnection): AcceptVerdict {
    try {
      const verdict = this.#policy.accept(conn);
      if (verdict === 'proxy' || verdict === 'hold' || verdict === 'refuse') return verdict;
      this.#log.error(`the accept policy of ${this.#name} answered ${String(verdict)}; refusing`);
    } catch (error) {
      this.#log.error(`the accept policy of ${this.#name} failed; refusing the client`, error);
    }
    return 'refuse';
  }

  /** @internal EngineSocket: a held connection's `proxy()`: core's dial schedule, from attempt 1. */
  handOver(conn: NativeConnection): void {
    this.#dial(conn, undefined);
  }

  /**
   * @internal EngineSocket: `refuse()`. A held, new or dialling connection is closed at once as
   * core's socket closes it (the listeners run now); the helper resets a client it held bytes of or
   * was dialling for, and its 'c' ends the count. A relaying one is closed as core's socket
   * destroys a relayed connection: no refusal is counted, and its close is published on the 'c'.
   */
  refuseConnection(conn: NativeConnection, reason: string): void {
    if (conn.state === 'relaying') {
      this.#engine.closeConnection(conn, 'fin');
      return;
    }
    this.#engine.closeConnection(conn, 'refuse');
    this.#publishRefused('policy', reason);
    conn.markClosed();
  }

  /** @internal EngineSocket */
  onPicksTaken(thread: number, epoch: number): void {
    this.#ahead?.taken(thread, epoch);
  }

  /**
   * The fast path's state, for tests and diagnostics: the epoch of the current picks and, per helper
   * thread, the epoch whose picks it holds (an endpoint change has reached every thread once they
   * are equal); undefined when this socket takes the per-accept path.
   */
  picksAhead(): PicksAheadState | undefined {
    return this.#ahead?.state();
  }

  /** @internal EngineSocket */
  onPickDialed(conn: NativeConnection, errno: number): void {
    if (conn.state === 'closed') return;
    const lb = this.#ctx.loadBalancer;
    if (errno === 0) {
      // What the dial schedule tells the balancer on a connect (outlier records are cleared).
      try {
        lb.reportDialResult?.(this.#ctx.servicePort, conn.endpoint, true);
      } catch (error) {
        this.#log.debug('reportDialResult failed', error);
      }
      this.#dialed(conn);
      return;
    }
    this.#ahead?.failed();
    const error = errnoError('connect', errnoName(errno), '(attempt 1 of a native connection)');
    this.#dial(conn, { endpoint: conn.endpoint, error });
  }

  /**
   * Core's dial schedule (the connection is its DialClient); after a failed pick made ahead, from
   * attempt 2 on. The options are one object per socket while the helper lives (the engine's
   * signal is new after each restart).
   */
  #dial(
    conn: NativeConnection,
    failedFirst: { endpoint: string; error: unknown } | undefined,
  ): void {
    const signal = this.#engine.signal;
    let opts = this.#dialOpts;
    if (opts === undefined || opts.signal !== signal) {
      opts = { timeoutsMs: this.#nodeTimeoutsMs, logger: this.#log, signal, name: this.#name };
      this.#dialOpts = opts;
    }
    if (failedFirst !== undefined) opts = { ...opts, failedFirst };
    const src = { address: conn.remoteAddress, port: conn.remotePort };
    dialEndpoints(this.#ctx.servicePort, src, 'TCP', this.#ctx.loadBalancer, opts, conn);
  }

  /** @internal EngineSocket: one attempt of the dial schedule. */
  dialAttempt(conn: NativeConnection, target: { host: string; port: number }): net.Socket {
    conn.endpoint = joinHostPort(target.host, target.port);
    return this.#engine.attempt(conn, target);
  }

  /** @internal EngineSocket: the dial schedule ended. */
  dialDone(conn: NativeConnection, error: unknown, connected: boolean): void {
    if (connected) this.#dialed(conn);
    else this.#dialFailed(conn, error);
  }

  #dialed(conn: NativeConnection): void {
    if (conn.state === 'closed') return;
    conn.endDial(true);
    this.#publishOpen(conn);
  }

  #publishOpen(conn: NativeConnection): void {
    conn.opened = true;
    if (!channels.connectionOpen.hasSubscribers) return;
    const message: ConnectionOpenMessage = {
      service: this.#name,
      protocol: 'TCP',
      client: joinHostPort(conn.remoteAddress, conn.remotePort),
      endpoint: conn.endpoint,
    };
    channels.connectionOpen.publish(message);
  }

  #dialFailed(conn: NativeConnection, error: unknown): void {
    conn.endpoint = '';
    if (conn.state === 'closed') return; // the helper died under it: already reported
    this.#engine.closeConnection(conn, 'fin');
    conn.markClosed(); // as core's socket: closed now, the helper's 'c' ends the count
    this.#publishRefused(refusalReason(error));
    const suppressed = this.#refusalLog.take();
    if (suppressed < 0) return;
    const more = suppressed > 0 ? ` (${suppressed} similar suppressed)` : '';
    const cause =
      error instanceof Error && error.cause !== undefined ? `: ${String(error.cause)}` : '';
    const line = `failed to connect a client of ${this.#name} to an endpoint: ${String(error)}${cause}${more}`;
    if (isNoEndpointsError(error)) this.#log.debug(line);
    else this.#log.warn(line);
  }

  /** @internal EngineSocket */
  onClosed(conn: NativeConnection, _how: CloseHow): void {
    if (conn.pickEpoch !== 0) conn.endpoint = ''; // closed while the helper dialled its pick
    // Connected, and closed before the dial schedule's promise said so (its 'd' and 'c' in one
    // chunk): the open is published now, so that every close has its open and the gauge stays true.
    if (!conn.opened && conn.connected && conn.endpoint !== '') this.#publishOpen(conn);
    // A helper that died took its byte counts along: the close is published with what Node knew
    // (0), so the active gauges come back to the truth.
    if (conn.opened && channels.connectionClose.hasSubscribers) {
      const message: ConnectionCloseMessage = {
        service: this.#name,
        protocol: 'TCP',
        endpoint: conn.endpoint,
        bytesIn: conn.bytesIn,
        bytesOut: conn.bytesOut,
        durationMs: performance.now() - conn.acceptedAt,
      };
      channels.connectionClose.publish(message);
    }
    this.#active--;
    conn.markClosed();
    this.#checkIdle();
  }

  /** @internal EngineSocket */
  onRefusedAtCap(): void {
    this.#publishRefused('connection-limit', 'the native helper is at maxHelperConnections');
  }

  /** @internal EngineSocket */
  onAcceptError(error: NodeJS.ErrnoException): void {
    if (channels.acceptError.hasSubscribers) {
      channels.acceptError.publish({ service: this.#name, protocol: 'TCP', error });
    }
    this.#log.warn(`accept failed on ${this.#describe()}: ${error.code}; pausing with back-off`);
  }

  /** @internal EngineSocket */
  onHelperExit(error: NativeHelperError): void {
    this.#ahead?.reset();
    // The engine logs the death once for every socket (a line, not a stack per socket).
    if (!this.#closed) this.#log.debug(`${this.#describe()} is down: ${error.message}`);
  }

  /** @internal EngineSocket */
  onRelisten(error: unknown, attempt = 1): void {
    if (this.#closed) return;
    if (error === undefined) this.#ahead?.refill(); // the new helper's rings start empty
    if (error === undefined) {
      this.#log.info(`accepting again on ${this.#describe()}${relistenAttempt(attempt)}`);
    } else if (attempt === 1) {
      this.#log.error(`listening again on ${this.#describe()} failed; retrying`, error);
    } else {
      this.#log.debug(`listening again on ${this.#describe()} failed (attempt ${attempt})`);
    }
  }

  #describe(): string {
    return `${joinHostPort(this.#addr.address, this.#addr.port)}/TCP (native)`;
  }

  #publishRefused(reason: RefusedMessage['reason'], detail?: string): void {
    if (!channels.refused.hasSubscribers) return;
    const message: RefusedMessage = { service: this.#name, protocol: 'TCP', reason };
    if (detail !== undefined) message.detail = detail;
    channels.refused.publish(message);
  }

  #checkIdle(): void {
    this.#drain.check(this.#closed && this.#active === 0);
  }
}
