/**
 * The native UDP proxy socket: the helper process receives, relays and replies (recvmmsg and
 * sendmmsg in batches, a socket per helper thread with SO_REUSEPORT); Node keeps the decisions of
 * core's UDP socket. A new client is either given an endpoint picked ahead (round robin without
 * affinity: no round trip) or reported to Node, which runs the same checks as core's socket (the
 * Service alive, source ranges, the load balancer's pick with ClientIP affinity and its reset
 * after an upstream error) and answers with an endpoint or a drop. Sessions are published on the
 * same diagnostics channels and kept in `info.activeClients` as core's are.
 * This file is longer than 400 lines because it holds core's UDP socket's whole contract
 * (verdicts, sessions, endpoint changes, helper restarts); its reporting is udp-socket-reports.ts.
 */
import net from 'node:net';
import {
  type Addr,
  type Logger,
  type ProxySocket,
  type ProxySocketContext,
  RoundRobinLoadBalancer,
  type ServiceInfo,
  servicePortNameString,
} from '@userspace-proxy/core';
import type { RefusedMessage } from '@userspace-proxy/core/diagnostics';
import {
  joinHostPort,
  refusalReason,
  sourceRangeCheck,
  splitHostPort,
} from '@userspace-proxy/core/sockets';
import { errnoError, type NativeHelperError } from './errors.js';
import { relistenAttempt } from './helper-supervisor.js';
import { listenAnyFamily, SocketDrain } from './native-socket-life.js';
import { PicksAhead, type PicksAheadState } from './picks-ahead.js';
import { errnoName } from './relay-protocol.js';
import type { NativeUdpEngine, UdpEngineSocket } from './udp-engine.js';
import { sessionThread, type UdpCloseReason, type UdpSessionTotals } from './udp-protocol.js';
import { UdpSocketReports } from './udp-socket-reports.js';

/** The idle timeout used when a ServiceInfo carries none that is usable (core's). */
const FALLBACK_IDLE_MS = 10_000;
/** New clients asked about before `proxyLoop` that wait for it; more are dropped. */
const MAX_EARLY_ASKS = 64;

/** What the socket needs of the factory's options. */
export interface UdpSocketSettings {
  readonly maxUdpSessions: number;
  readonly maxUdpSessionsPerSource: number;
  /** Receive and send buffer of each helper thread's Service socket, bytes. */
  readonly receiveBufferBytes: number;
  /** Receive and send buffer of each session's upstream socket; 0 keeps the OS default. */
  readonly sessionBufferBytes: number;
}

/** One session as Node knows it; the value kept in `info.activeClients`. */
export interface NativeUdpSession {
  readonly id: number;
  /** "ip:port" of the client. */
  readonly client: string;
  readonly clientAddress: string;
  readonly clientPort: number;
  /** "ip:port" of the endpoint. */
  readonly endpoint: string;
  readonly openedAt: number;
}

/** See the module comment. Made by {@link withNativeUdp}. */
export class NativeUdpProxySocket implements ProxySocket, UdpEngineSocket {
  readonly #ctx: ProxySocketContext;
  readonly #engine: NativeUdpEngine;
  readonly #listener: number;
  readonly #addr: Addr;
  readonly #allowed: ((address: string | undefined) => boolean) | undefined;
  readonly #log: Logger;
  readonly #name: string;
  readonly #reports: UdpSocketReports;
  readonly #sessions = new Map<number, NativeUdpSession>();
  /** Asked sessions Node refused, until their 'c': why, so their queued datagrams count too. */
  readonly #refusing = new Map<number, RefusedMessage['reason']>();
  /** Clients whose last session died of an upstream error: their next pick skips affinity. */
  readonly #resetAffinity = new Set<string>();
  readonly #settings: UdpSocketSettings;
  #early: { session: number; address: string; port: number }[] = [];
  #info: ServiceInfo | undefined;
  #ahead: PicksAhead | undefined;
  #unwatch: (() => void) | undefined;
  #sweepQueued = false;
  #closed = false;
  #closing: Promise<void> | undefined;
  readonly #drain = new SocketDrain();

  /** Binds through the engine; see {@link withNativeUdp}. */
  static async open(
    ctx: ProxySocketContext,
    engine: NativeUdpEngine,
    settings: UdpSocketSettings,
  ): Promise<NativeUdpProxySocket> {
    const forwarder = new UdpSocketForwarder(engine);
    const spec = (address: string) => ({
      address,
      port: ctx.port,
      idleMs: FALLBACK_IDLE_MS,
      maxSessions: settings.maxUdpSessions,
      maxPerSource: settings.maxUdpSessionsPerSource,
      receiveBufferBytes: settings.receiveBufferBytes,
      sessionBufferBytes: settings.sessionBufferBytes,
    });
    const { address, r } = await listenAnyFamily(ctx, (a) =>
      engine.listen(forwarder, spec(a), ctx.logger),
    );
    const socket = new NativeUdpProxySocket(ctx, engine, r.listener, address, r.port, settings);
    forwarder.socket = socket;
    socket.#early = forwarder.early;
    forwarder.early = [];
    return socket;
  }

  private constructor(
    ctx: ProxySocketContext,
    engine: NativeUdpEngine,
    listener: number,
    address: string,
    port: number,
    settings: UdpSocketSettings,
  ) {
    this.#ctx = ctx;
    this.#engine = engine;
    this.#listener = listener;
    this.#addr = { address, port, family: net.isIPv6(address) ? 'IPv6' : 'IPv4' };
    this.#allowed = sourceRangeCheck(ctx.allowedSources);
    this.#log = ctx.logger;
    this.#name = servicePortNameString(ctx.servicePort);
    this.#reports = new UdpSocketReports(this.#name, this.#log);
    this.#settings = settings;
  }

  addr(): Addr {
    return { ...this.#addr };
  }

  listenPort(): number {
    return this.#ctx.port;
  }

  /** Live sessions (the helper's, as Node has heard of them). */
  get sessionCount(): number {
    return this.#sessions.size;
  }

  proxyLoop(info: ServiceInfo): Promise<void> {
    if (this.#info !== undefined || this.#closed) return this.#drain.loopDone;
    let idleMs = info.udpIdleTimeoutMs;
    if (!(Number.isFinite(idleMs) && idleMs > 0)) {
      this.#log.warn(`${this.#name}: unusable udpIdleTimeoutMs ${String(idleMs)}; using 10 000`);
      idleMs = FALLBACK_IDLE_MS;
    }
    this.#info = info;
    if (idleMs !== FALLBACK_IDLE_MS) this.#engine.setIdle(this.#listener, idleMs);
    this.#unwatch = this.#ctx.onEndpointsChanged(this.#onEndpointsChanged);
    if (this.#picksAheadApply(info)) {
      this.#ahead = new PicksAhead(
        this.#engine,
        this.#listener,
        this.#ctx.servicePort,
        this.#ctx.loadBalancer,
      );
      this.#ahead.refill();
    }
    const early = this.#early;
    this.#early = [];
    for (const a of early) this.onAsked(a.session, a.address, a.port);
    this.#log.debug(`proxying ${this.#name} on ${this.#describe()}`);
    return this.#drain.loopDone;
  }

  /**
   * Picks made ahead stand for the per-session pick only when it cannot depend on the client (no
   * session affinity, core's round-robin balancer) and no check of Node's may drop the client
   * (source ranges); the session caps are the helper's own either way.
   */
  #picksAheadApply(info: ServiceInfo): boolean {
    return (
      info.sessionAffinityType !== 'ClientIP' &&
      this.#ctx.loadBalancer instanceof RoundRobinLoadBalancer &&
      this.#allowed === undefined
    );
  }

  /**
   * The fast path's state, for tests and diagnostics: the current epoch and, per helper thread, the
   * epoch whose picks it holds; undefined when every new session asks Node.
   */
  picksAhead(): PicksAheadState | undefined {
    return this.#ahead?.state();
  }

  close(): Promise<void> {
    if (this.#closing !== undefined) return this.#closing;
    this.#closed = true;
    this.#unwatch?.();
    this.#ahead?.stop();
    for (const a of this.#early) this.#engine.verdict(a.session, undefined);
    this.#early = [];
    this.#closing = this.#engine.closeListener(this.#listener).then(() => {
      // Sessions the helper could not report (it died meanwhile) end here.
      for (const id of [...this.#sessions.keys()]) this.#end(id, undefined, 'closed', 0);
      this.#resetAffinity.clear();
    });
    this.#drain.endLoop();
    return this.#closing;
  }

  activeConnections(): number {
    return this.#sessions.size;
  }

  idle(): Promise<void> {
    return this.#drain.idle(this.#closed && this.#sessions.size === 0);
  }

  abortConnections(): void {
    for (const id of this.#sessions.keys()) this.#engine.closeSession(id, 'closed');
  }

  /** @internal UdpEngineSocket: a new client waits for Node's verdict. */
  onAsked(session: number, address: string, port: number): void {
    this.#ahead?.missed(sessionThread(session));
    const info = this.#info;
    if (this.#closed || info === undefined) {
      this.#engine.verdict(session, undefined);
      return;
    }
    if (!info.isAlive()) {
      this.#engine.verdict(session, undefined);
      void this.close();
      return;
    }
    if (this.#allowed !== undefined && !this.#allowed(address)) {
      this.#drop(session, 'source-range', `${address} is outside the source ranges`);
      return;
    }
    const client = joinHostPort(address, port);
    let endpoint: string;
    try {
      const reset = this.#resetAffinity.delete(client);
      endpoint = this.#ctx.loadBalancer.nextEndpoint(
        this.#ctx.servicePort,
        { address, port },
        reset,
      );
    } catch (error) {
      this.#drop(session, refusalReason(error), String(error));
      return;
    }
    const target = splitHostPort(endpoint);
    if (target === undefined || net.isIP(target.host) === 0 || target.port === 0) {
      this.#reports.dialError(endpoint, new Error(`invalid endpoint "${endpoint}"`));
      this.#drop(session, 'dial-failed', `invalid endpoint "${endpoint}"`);
      return;
    }
    this.#engine.verdict(session, { host: target.host, port: target.port });
    this.#opened(session, address, port, endpoint);
  }

  /** @internal UdpEngineSocket: the helper opened a session with a pick made ahead. */
  onOpened(session: number, epoch: number, address: string, port: number, endpoint: string): void {
    this.#ahead?.used(sessionThread(session), epoch);
    if (this.#closed) {
      this.#engine.closeSession(session, 'closed');
      return;
    }
    this.#opened(session, address, port, endpoint);
  }

  #opened(id: number, clientAddress: string, clientPort: number, endpoint: string): void {
    const client = joinHostPort(clientAddress, clientPort);
    const session: NativeUdpSession = {
      id,
      client,
      clientAddress,
      clientPort,
      endpoint,
      openedAt: performance.now(),
    };
    this.#sessions.set(id, session);
    this.#info?.activeClients.set(client, session);
    this.#reports.sessionOpened(client, endpoint);
  }

  /** @internal UdpEngineSocket */
  onClosed(id: number, totals: UdpSessionTotals, reason: UdpCloseReason, errno: number): void {
    const refused = this.#refusing.get(id);
    if (refused !== undefined) {
      this.#refusing.delete(id);
      // The datagrams that waited for the verdict were refused with the first (already counted).
      for (let i = 1; i < totals.dropped; i++) this.#reports.publishRefused(refused);
      return;
    }
    this.#end(id, totals, reason, errno);
  }

  #end(
    id: number,
    totals: UdpSessionTotals | undefined,
    reason: UdpCloseReason,
    errno: number,
  ): void {
    const session = this.#sessions.get(id);
    if (session === undefined) return;
    this.#sessions.delete(id);
    const info = this.#info;
    if (info?.activeClients.get(session.client) === session) {
      info.activeClients.delete(session.client);
    }
    const error = errno !== 0 ? errnoError('recv', errnoName(errno), session.endpoint) : undefined;
    if (reason === 'dial-failed') {
      const cause = error ?? new Error(`cannot connect to ${session.endpoint}`);
      this.#reports.dialError(session.endpoint, cause);
      this.#reports.refuse('dial-failed', `${session.endpoint}: ${cause.message}`);
    }
    if (
      reason === 'error' &&
      !this.#closed &&
      (totals?.datagramsIn ?? 0) > 0 &&
      this.#resetAffinity.size < this.#settings.maxUdpSessions
    ) {
      this.#resetAffinity.add(session.client);
    }
    const detail = error === undefined ? reason : `${reason}: ${error.message}`;
    this.#log.debug(`UDP session ${session.client} -> ${session.endpoint} ended (${detail})`);
    // A helper that died took its counts along: the close is published with zeros (what Node
    // knows), so the active gauges and the status page come back to the truth.
    this.#reports.sessionClosed(session, totals);
    this.#checkIdle();
  }

  /** @internal UdpEngineSocket: datagrams the helper dropped at its caps and full queues. */
  onDropped(atCap: number, queueFull: number): void {
    if (atCap > 0) {
      for (let i = 0; i < atCap; i++) this.#reports.publishRefused('udp-session-limit');
      this.#reports.logRefusal(
        'udp-session-limit',
        `${atCap} datagram(s) of new clients over maxUdpSessions or maxUdpSessionsPerSource`,
      );
    }
    if (queueFull > 0) this.#reports.logQueueFull(queueFull);
  }

  /** @internal UdpEngineSocket */
  onPicksTaken(thread: number, epoch: number): void {
    this.#ahead?.taken(thread, epoch);
  }

  /** @internal UdpEngineSocket */
  onHelperExit(error: NativeHelperError): void {
    this.#ahead?.reset();
    // The engine logs the death once for every socket (a line, not a stack per socket).
    if (!this.#closed) this.#log.debug(`${this.#describe()} is down: ${error.message}`);
  }

  /** @internal UdpEngineSocket */
  onRelisten(error: unknown, attempt = 1): void {
    if (this.#closed) return;
    if (error === undefined) {
      this.#ahead?.refill();
      this.#log.info(`serving again on ${this.#describe()}${relistenAttempt(attempt)}`);
    } else if (attempt === 1) {
      this.#log.error(`binding again on ${this.#describe()} failed; retrying`, error);
    } else {
      this.#log.debug(`binding again on ${this.#describe()} failed (attempt ${attempt})`);
    }
  }

  /**
   * Endpoints changed: sessions whose endpoint left end (as core's UDP socket does, kube-proxy's
   * conntrack flush), and the picks made ahead are replaced. Runs in the Proxier's handler: only
   * schedules; a burst of changes sweeps once.
   */
  readonly #onEndpointsChanged = (): void => {
    if (this.#info?.sessionAffinityType === 'ClientIP') this.#ahead?.stop();
    else this.#ahead?.refill();
    if (this.#sweepQueued) return;
    this.#sweepQueued = true;
    setImmediate(this.#sweep);
  };

  readonly #sweep = (): void => {
    this.#sweepQueued = false;
    if (this.#closed || this.#sessions.size === 0) return;
    const current = this.#ctx.loadBalancer.endpoints?.(this.#ctx.servicePort);
    if (current === undefined) return;
    const live = new Set(current);
    let ended = 0;
    for (const session of this.#sessions.values()) {
      if (live.has(session.endpoint)) continue;
      this.#engine.closeSession(session.id, 'endpoint-removed');
      ended++;
    }
    if (ended > 0)
      this.#log.info(`${this.#name}: ending ${ended} UDP session(s) whose endpoint left`);
  };

  /** Refuses an asked session: the helper drops it and its queued datagrams. */
  #drop(session: number, reason: RefusedMessage['reason'], detail: string): void {
    this.#engine.verdict(session, undefined);
    if (this.#refusing.size < this.#settings.maxUdpSessions) this.#refusing.set(session, reason);
    this.#reports.refuse(reason, detail);
  }

  #describe(): string {
    return `${joinHostPort(this.#addr.address, this.#addr.port)}/UDP (native)`;
  }

  #checkIdle(): void {
    this.#drain.check(this.#closed && this.#sessions.size === 0);
  }
}

/**
 * What the engine calls for one listener: the socket once it exists; until then new clients wait
 * in `early` (bounded; past it they are refused). A class, so its methods are shared: thousands of
 * listeners hold no closures each.
 */
class UdpSocketForwarder implements UdpEngineSocket {
  socket: NativeUdpProxySocket | undefined;
  early: { session: number; address: string; port: number }[] = [];
  readonly #engine: NativeUdpEngine;

  constructor(engine: NativeUdpEngine) {
    this.#engine = engine;
  }

  onAsked(session: number, address: string, port: number): void {
    if (this.socket !== undefined) this.socket.onAsked(session, address, port);
    else if (this.early.length < MAX_EARLY_ASKS) this.early.push({ session, address, port });
    else this.#engine.verdict(session, undefined);
  }
  onOpened(session: number, epoch: number, address: string, port: number, endpoint: string): void {
    this.socket?.onOpened(session, epoch, address, port, endpoint);
  }
  onClosed(session: number, totals: UdpSessionTotals, reason: UdpCloseReason, errno: number): void {
    this.socket?.onClosed(session, totals, reason, errno);
  }
  onDropped(atCap: number, queueFull: number): void {
    this.socket?.onDropped(atCap, queueFull);
  }
  onPicksTaken(thread: number, epoch: number): void {
    this.socket?.onPicksTaken(thread, epoch);
  }
  onHelperExit(error: NativeHelperError): void {
    this.socket?.onHelperExit(error);
  }
  onRelisten(error: unknown, attempt?: number): void {
    this.socket?.onRelisten(error, attempt);
  }
}
