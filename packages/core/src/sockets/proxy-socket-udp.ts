import type dgram from 'node:dgram';
import net from 'node:net';
import {
  channels,
  type DialErrorMessage,
  type RefusedMessage,
  type UdpSessionCloseMessage,
  type UdpSessionMessage,
} from '../diagnostics.js';
import type { Addr } from '../model/model.js';
import type { ServiceInfo } from '../model/service-info.js';
import { joinHostPort, servicePortNameString, splitHostPort } from '../model/service-port-name.js';
import { ListeningSocket } from './listening-socket.js';
import { LogLimiter } from './log-limiter.js';
import type { ProxySocketContext } from './proxy-socket.js';
import {
  type ProxySocketOptions,
  type ResolvedProxySocketOptions,
  resolveProxySocketOptions,
} from './proxy-socket-options.js';
import { refusalReason } from './refusal.js';
import { SilenceWheel } from './silence-wheel.js';
import { bindSocket } from './udp-bind.js';
import { UdpSession, type UdpSessionEndReason, type UdpSessionOwner } from './udp-session.js';

export { createLiteralLookup } from './udp-bind.js';

/** The idle timeout used when a ServiceInfo carries none that is usable (the Proxier's default). */
export const FALLBACK_UDP_IDLE_TIMEOUT_MS = 10_000;
/** Options of {@link UdpProxySocket.open}: the tuning options plus injection points. */
export interface UdpProxySocketOptions extends ProxySocketOptions {
  /** Makes the Service socket and every session's upstream socket. Default `dgram.createSocket`. */
  createSocket?: (options: dgram.SocketOptions) => dgram.Socket;
}

/**
 * The default UDP proxy socket: one connected upstream socket per client "ip:port", replies sent
 * back from the Service's own socket. Unlike the reference it relays datagrams of any size up to
 * 65 507 bytes intact (no 4 KiB read buffer, kubernetes#47659), caps the number of sessions
 * (kubernetes#12144: one descriptor per client exhausted the process), and never dies on a bad
 * datagram or a descriptor shortage (kubernetes#16079). Idle sessions are found by the shared
 * {@link SilenceWheel} of their timeout: a datagram costs one clock read, not a timer refresh.
 */
export class UdpProxySocket extends ListeningSocket {
  readonly #socket: dgram.Socket;
  readonly #opts: ResolvedProxySocketOptions;
  readonly #createSocket: ((options: dgram.SocketOptions) => dgram.Socket) | undefined;
  readonly #name: string;
  readonly #refusalLog = new LogLimiter();
  readonly #errorLog = new LogLimiter();
  /** Sessions by client address, then port: no string is built per datagram. */
  readonly #sessions = new Map<string, Map<number, UdpSession>>();
  /** Clients whose last session died of an upstream error: their next pick skips affinity. */
  readonly #resetAffinity = new Set<string>();
  /** What sessions report to; kept private so the socket's public surface is only ProxySocket's. */
  readonly #owner: UdpSessionOwner = {
    reply: (session, datagram) => this.#reply(session, datagram),
    dialFailed: (session, error) => this.#dialFailed(session, error),
    ended: (session, reason, error) => this.#ended(session, reason, error),
  };
  #serving: ServiceInfo | undefined;
  #wheel: SilenceWheel | undefined;
  #closed: Promise<void> | undefined;
  /** Ends the endpoints subscription, made with the first session (none for a socket never used). */
  #unwatchEndpoints: (() => void) | undefined;
  #sweepQueued = false;

  /**
   * Binds the context's address (all addresses, dual-stack where the host has IPv6, when null) and
   * port.
   * @throws InvalidOptionError for a bad option; the bind error itself, which the factory wraps in
   * SocketOpenError.
   */
  static async open(
    context: ProxySocketContext,
    opts: UdpProxySocketOptions = {},
  ): Promise<UdpProxySocket> {
    const { ip, port } = context;
    const resolved = resolveProxySocketOptions(opts);
    const bind = (type: 'udp4' | 'udp6', address: string) =>
      bindSocket(opts.createSocket, type, address, port, resolved.udpBufferBytes);
    let socket: dgram.Socket;
    if (ip !== null) {
      socket = await bind(net.isIPv6(ip) ? 'udp6' : 'udp4', ip);
    } else {
      try {
        socket = await bind('udp6', '::');
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EAFNOSUPPORT') throw error;
        socket = await bind('udp4', '0.0.0.0');
      }
    }
    const bound = socket.address();
    const addr: Addr = {
      address: bound.address,
      port: bound.port,
      family: bound.family === 'IPv6' ? 'IPv6' : 'IPv4',
    };
    return new UdpProxySocket(context, socket, addr, resolved, opts);
  }

  private constructor(
    context: ProxySocketContext,
    socket: dgram.Socket,
    addr: Addr,
    opts: ResolvedProxySocketOptions,
    inject: UdpProxySocketOptions,
  ) {
    super(context, addr, 'UDP');
    this.#socket = socket;
    this.#opts = opts;
    this.#createSocket = inject.createSocket;
    this.#name = servicePortNameString(context.servicePort);
    socket.on('error', this.#onSocketError);
  }

  /** Live sessions. */
  get sessionCount(): number {
    return this.activeConnections();
  }

  /** Starts serving with the idle timeout of `info`. */
  protected serve(info: ServiceInfo): void {
    let idleMs = info.udpIdleTimeoutMs;
    if (!(Number.isFinite(idleMs) && idleMs > 0)) {
      this.log.warn(`${this.#name}: unusable udpIdleTimeoutMs ${String(idleMs)}; using 10 000`);
      idleMs = FALLBACK_UDP_IDLE_TIMEOUT_MS;
    }
    this.#wheel = SilenceWheel.for(idleMs);
    this.#serving = info;
    this.log.debug(`proxying ${this.#name} on ${this.describe()}`);
    this.#socket.on('message', this.#onMessage);
  }

  /** ProxySocket: ends every session now (they end at `close` anyway). */
  override abortConnections(): void {
    for (const byPort of [...this.#sessions.values()]) {
      for (const session of [...byPort.values()]) session.close('closed');
    }
  }

  /** Ends every session and closes the socket; resolves once it is closed. */
  protected shutdown(): Promise<void> {
    this.#unwatchEndpoints?.();
    for (const byPort of this.#sessions.values()) {
      for (const session of byPort.values()) session.close('closed');
    }
    this.#resetAffinity.clear();
    this.#closed = new Promise((resolve) => {
      try {
        this.#socket.close(() => resolve());
      } catch {
        resolve();
      }
    });
    return this.#closed;
  }

  protected closing(): Promise<void> {
    return this.#closed ?? Promise.resolve();
  }

  readonly #onMessage = (datagram: Buffer, rinfo: dgram.RemoteInfo): void => {
    let session = this.#sessions.get(rinfo.address)?.get(rinfo.port);
    if (session === undefined) {
      session = this.#openSession(rinfo.address, rinfo.port);
      if (session === undefined) return;
    }
    session.touched = true;
    session.send(datagram);
  };

  #openSession(address: string, port: number): UdpSession | undefined {
    const info = this.#serving;
    if (info === undefined || this.#closed !== undefined) return undefined;
    if (!info.isAlive()) {
      void this.close();
      return undefined;
    }
    if (!this.admitted(address)) return undefined;
    if (this.activeConnections() >= this.#opts.maxUdpSessions) {
      this.#refuse('udp-session-limit', `${this.#opts.maxUdpSessions} sessions open`);
      return undefined;
    }
    const fromSource = this.#sessions.get(address)?.size ?? 0;
    if (fromSource >= this.#opts.maxUdpSessionsPerSource) {
      this.#refuse(
        'udp-session-limit',
        `${fromSource} sessions open from ${address}, its share (maxUdpSessionsPerSource)`,
      );
      return undefined;
    }
    const client = joinHostPort(address, port);
    let endpoint: string;
    try {
      const reset = this.#resetAffinity.delete(client);
      endpoint = this.context.loadBalancer.nextEndpoint(
        this.context.servicePort,
        { address, port },
        reset,
      );
    } catch (error) {
      this.#refuse(refusalReason(error), String(error));
      return undefined;
    }
    const target = splitHostPort(endpoint);
    const family = target === undefined ? 0 : net.isIP(target.host);
    if (target === undefined || family === 0 || target.port === 0) {
      this.#publishDialError(endpoint, new Error(`invalid endpoint "${endpoint}"`));
      this.#refuse('dial-failed', `invalid endpoint "${endpoint}"`);
      return undefined;
    }
    const session = new UdpSession({
      clientAddress: address,
      clientPort: port,
      client,
      endpoint,
      host: target.host,
      port: target.port,
      type: family === 6 ? 'udp6' : 'udp4',
      bufferBytes: this.#opts.udpBufferBytes,
      owner: this.#owner,
      ...(this.#createSocket ? { createSocket: this.#createSocket } : {}),
    });
    let byPort = this.#sessions.get(address);
    if (byPort === undefined) {
      byPort = new Map();
      this.#sessions.set(address, byPort);
    }
    byPort.set(port, session);
    info.activeClients.set(client, session);
    this.connectionOpened();
    if (this.#unwatchEndpoints === undefined) this.#watchEndpoints();
    this.#wheel?.add(session);
    this.log.debug(`new UDP session ${client} -> ${endpoint} for ${this.#name}`);
    if (channels.udpSessionOpen.hasSubscribers) {
      const message: UdpSessionMessage = {
        service: this.#name,
        protocol: 'UDP',
        client,
        endpoint,
      };
      channels.udpSessionOpen.publish(message);
    }
    session.start();
    return session.open ? session : undefined;
  }

  /**
   * Subscribes to the port's endpoint changes, so a session whose endpoint left ends and the
   * client's next datagram picks a live one, as kube-proxy's conntrack flush of stale UDP endpoints
   * does. Without it (the reference) a client that sends more often than the idle timeout, a
   * statsd or syslog client say, stays pinned to a deleted pod for good. A balancer without
   * `endpoints()` cannot say which endpoints are current: then sessions end only when idle.
   */
  #watchEndpoints(): void {
    if (typeof this.context.loadBalancer.endpoints !== 'function') {
      this.#unwatchEndpoints = () => {};
      return;
    }
    this.#unwatchEndpoints = this.context.onEndpointsChanged(this.#onEndpointsChanged);
  }

  /** Runs in the Proxier's endpoint handler: only schedules; a burst of changes sweeps once. */
  readonly #onEndpointsChanged = (): void => {
    if (this.#sweepQueued) return;
    this.#sweepQueued = true;
    setImmediate(this.#sweepSessions);
  };

  readonly #sweepSessions = (): void => {
    this.#sweepQueued = false;
    if (this.#closed !== undefined || this.#sessions.size === 0) return;
    const current = this.context.loadBalancer.endpoints?.(this.context.servicePort);
    if (current === undefined) return;
    const live = new Set(current);
    let ended = 0;
    for (const byPort of [...this.#sessions.values()]) {
      for (const session of [...byPort.values()]) {
        if (live.has(session.endpoint)) continue;
        session.close('endpoint-removed');
        ended++;
      }
    }
    if (ended > 0) {
      this.log.info(`${this.#name}: ended ${ended} UDP session(s) whose endpoint left`);
    }
  };

  /** A reply goes out from the Service's socket, so the client sees the address it sent to. */
  #reply(session: UdpSession, datagram: Buffer): void {
    if (this.#closed !== undefined) return;
    session.touched = true;
    try {
      this.#socket.send(datagram, session.clientPort, session.clientAddress);
    } catch (error) {
      this.#logError(`reply to ${session.client} failed: ${String(error)}`);
    }
  }

  #dialFailed(session: UdpSession, error: Error): void {
    if (this.#serving === undefined) return;
    this.#publishDialError(session.endpoint, error);
    this.#refuse('dial-failed', `${session.endpoint}: ${error.message}`);
  }

  #ended(session: UdpSession, reason: UdpSessionEndReason, error?: Error): void {
    const byPort = this.#sessions.get(session.clientAddress);
    if (byPort?.get(session.clientPort) !== session) return;
    byPort.delete(session.clientPort);
    if (byPort.size === 0) this.#sessions.delete(session.clientAddress);
    this.#wheel?.delete(session);
    this.connectionClosed();
    const info = this.#serving;
    if (info === undefined) return;
    if (info.activeClients.get(session.client) === session) {
      info.activeClients.delete(session.client);
    }
    if (reason === 'error' && this.#closed === undefined && session.datagramsIn > 0) {
      if (this.#resetAffinity.size < this.#opts.maxUdpSessions)
        this.#resetAffinity.add(session.client);
    }
    const detail = error === undefined ? reason : `${reason}: ${error.message}`;
    this.log.debug(`UDP session ${session.client} -> ${session.endpoint} ended (${detail})`);
    if (channels.udpSessionClose.hasSubscribers) {
      const message: UdpSessionCloseMessage = {
        service: this.#name,
        protocol: 'UDP',
        client: session.client,
        endpoint: session.endpoint,
        datagramsIn: session.datagramsIn,
        datagramsOut: session.datagramsOut,
        bytesIn: session.bytesIn,
        bytesOut: session.bytesOut,
      };
      channels.udpSessionClose.publish(message);
    }
  }

  #refuse(reason: RefusedMessage['reason'], detail: string): void {
    if (channels.refused.hasSubscribers) {
      const message: RefusedMessage = { service: this.#name, protocol: 'UDP', reason };
      channels.refused.publish(message);
    }
    const suppressed = this.#refusalLog.take();
    if (suppressed < 0) return;
    const more = suppressed > 0 ? ` (${suppressed} more dropped since the last report)` : '';
    this.log.warn(`dropping a datagram for ${this.#name} (${reason}): ${detail}${more}`);
  }

  #publishDialError(endpoint: string, error: Error): void {
    if (!channels.dialError.hasSubscribers) return;
    const message: DialErrorMessage = { service: this.#name, protocol: 'UDP', endpoint, error };
    channels.dialError.publish(message);
  }

  #logError(line: string): void {
    const suppressed = this.#errorLog.take();
    if (suppressed >= 0) {
      this.log.warn(suppressed > 0 ? `${line} (${suppressed} similar suppressed)` : line);
    }
  }

  /** A receive error (ICMP feedback, ENOBUFS) on the Service socket: log it and keep serving. */
  readonly #onSocketError = (error: Error): void => {
    this.#logError(`${this.describe()}: ${error.message}`);
  };
}
