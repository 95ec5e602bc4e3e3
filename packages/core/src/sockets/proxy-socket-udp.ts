import dgram from 'node:dgram';
import net from 'node:net';
import {
  channels,
  type DialErrorMessage,
  type RefusedMessage,
  type UdpSessionCloseMessage,
  type UdpSessionMessage,
} from '../diagnostics.js';
import { MissingEndpointsError, MissingServiceEntryError } from '../errors.js';
import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import { componentLogger, type Logger } from '../logger.js';
import type { Addr } from '../model/model.js';
import type { ServiceInfo } from '../model/service-info.js';
import {
  joinHostPort,
  type ServicePortName,
  servicePortNameString,
  splitHostPort,
} from '../model/service-port-name.js';
import { LogLimiter } from './log-limiter.js';
import type { ProxySocket } from './proxy-socket.js';
import {
  DEFAULT_UDP_SERVICE_RECEIVE_BUFFER_BYTES,
  type ProxySocketOptions,
  type ResolvedProxySocketOptions,
  resolveProxySocketOptions,
} from './proxy-socket-options.js';
import { UdpSession, type UdpSessionEndReason, type UdpSessionOwner } from './udp-session.js';

/** The idle timeout used when a ServiceInfo carries none that is usable (the Proxier's default). */
export const FALLBACK_UDP_IDLE_TIMEOUT_MS = 10_000;
/**
 * Idle sessions are found by a coarse wheel: a clock that ticks every timeout/8, and a session
 * ends on the first tick that finds it silent for more than 8 ticks. Traffic costs one integer
 * store per datagram instead of a timer refresh, and a session ends between 1 and 1.125 timeouts
 * after its last datagram.
 */
const WHEEL_SLOTS = 8;

/** Options of {@link UdpProxySocket.open}: the tuning options plus injection points. */
export interface UdpProxySocketOptions extends ProxySocketOptions {
  logger?: Logger;
  /** Makes the Service socket and every session's upstream socket. Default `dgram.createSocket`. */
  createSocket?: (options: dgram.SocketOptions) => dgram.Socket;
}

interface Serving {
  service: ServicePortName;
  name: string;
  info: ServiceInfo;
  lb: LoadBalancer;
}

/**
 * The default UDP proxy socket: one connected upstream socket per client "ip:port", replies sent
 * back from the Service's own socket. Unlike the reference it relays datagrams of any size up to
 * 65 507 bytes intact (no 4 KiB read buffer, kubernetes#47659), caps the number of sessions
 * (kubernetes#12144: one descriptor per client exhausted the process), and never dies on a bad
 * datagram or a descriptor shortage (kubernetes#16079).
 */
export class UdpProxySocket implements ProxySocket {
  readonly #socket: dgram.Socket;
  readonly #requestedPort: number;
  readonly #addr: Addr;
  readonly #opts: ResolvedProxySocketOptions;
  readonly #createSocket: ((options: dgram.SocketOptions) => dgram.Socket) | undefined;
  readonly #log: Logger;
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
  #count = 0;
  #serving: Serving | undefined;
  #epoch = 0;
  #tickMs = FALLBACK_UDP_IDLE_TIMEOUT_MS / WHEEL_SLOTS;
  #wheel: NodeJS.Timeout | undefined;
  #closed: Promise<void> | undefined;
  #loopDone: Promise<void>;
  #endLoop!: () => void;

  /**
   * Binds `ip` (all addresses, dual-stack where the host has IPv6, when null) and `port`.
   * @throws InvalidOptionError for a bad option; the bind error itself, which the factory wraps in
   * SocketOpenError.
   */
  static async open(
    ip: string | null,
    port: number,
    opts: UdpProxySocketOptions = {},
  ): Promise<UdpProxySocket> {
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
    return new UdpProxySocket(socket, port, resolved, opts);
  }

  private constructor(
    socket: dgram.Socket,
    requestedPort: number,
    opts: ResolvedProxySocketOptions,
    inject: UdpProxySocketOptions,
  ) {
    this.#socket = socket;
    this.#requestedPort = requestedPort;
    const bound = socket.address();
    this.#addr = {
      address: bound.address,
      port: bound.port,
      family: bound.family === 'IPv6' ? 'IPv6' : 'IPv4',
    };
    this.#opts = opts;
    this.#createSocket = inject.createSocket;
    this.#log = componentLogger(inject.logger, 'proxy-socket-udp');
    this.#loopDone = new Promise((resolve) => {
      this.#endLoop = resolve;
    });
    socket.on('error', this.#onSocketError);
  }

  /** The bound address (a copy); with port 0 asked for, the port the OS chose. */
  addr(): Addr {
    return { ...this.#addr };
  }

  /** The port asked for (0 when the OS chose), which is what the Proxier releases. */
  listenPort(): number {
    return this.#requestedPort;
  }

  /** Live sessions. */
  get sessionCount(): number {
    return this.#count;
  }

  /**
   * Starts serving `service` with the idle timeout of `info`. Resolves when the socket is closed (or
   * closes itself on finding `info.isAlive()` false); never rejects.
   */
  proxyLoop(service: ServicePortName, info: ServiceInfo, lb: LoadBalancer): Promise<void> {
    if (this.#serving !== undefined) {
      this.#log.warn(`proxyLoop called twice on ${this.#describe()}; ignoring the second call`);
      return this.#loopDone;
    }
    if (this.#closed !== undefined) return this.#loopDone;
    const name = servicePortNameString(service);
    let idleMs = info.udpIdleTimeoutMs;
    if (!(Number.isFinite(idleMs) && idleMs > 0)) {
      this.#log.warn(`${name}: unusable udpIdleTimeoutMs ${String(idleMs)}; using 10 000`);
      idleMs = FALLBACK_UDP_IDLE_TIMEOUT_MS;
    }
    this.#tickMs = Math.max(1, idleMs / WHEEL_SLOTS);
    this.#serving = { service, name, info, lb };
    this.#log.debug(`proxying ${name} on ${this.#describe()}`);
    this.#socket.on('message', this.#onMessage);
    return this.#loopDone;
  }

  /** Ends every session and closes the socket (idempotent); resolves once it is closed. */
  close(): Promise<void> {
    if (this.#closed === undefined) {
      clearInterval(this.#wheel);
      this.#wheel = undefined;
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
      this.#log.debug(`closed ${this.#describe()}`);
      this.#endLoop();
    }
    return this.#closed;
  }

  #describe(): string {
    return `${joinHostPort(this.#addr.address, this.#addr.port)}/UDP`;
  }

  readonly #onMessage = (datagram: Buffer, rinfo: dgram.RemoteInfo): void => {
    let session = this.#sessions.get(rinfo.address)?.get(rinfo.port);
    if (session === undefined) {
      session = this.#openSession(rinfo.address, rinfo.port);
      if (session === undefined) return;
    }
    session.lastActive = this.#epoch;
    session.send(datagram);
  };

  #openSession(address: string, port: number): UdpSession | undefined {
    const serving = this.#serving;
    if (serving === undefined || this.#closed !== undefined) return undefined;
    if (!serving.info.isAlive()) {
      void this.close();
      return undefined;
    }
    if (this.#count >= this.#opts.maxUdpSessions) {
      this.#refuse(serving, 'udp-session-limit', `${this.#opts.maxUdpSessions} sessions open`);
      return undefined;
    }
    const client = joinHostPort(address, port);
    let endpoint: string;
    try {
      const reset = this.#resetAffinity.delete(client);
      endpoint = serving.lb.nextEndpoint(serving.service, { address, port }, reset);
    } catch (error) {
      const none =
        error instanceof MissingEndpointsError || error instanceof MissingServiceEntryError;
      this.#refuse(serving, none ? 'no-endpoints' : 'other', String(error));
      return undefined;
    }
    const target = splitHostPort(endpoint);
    const family = target === undefined ? 0 : net.isIP(target.host);
    if (target === undefined || family === 0 || target.port === 0) {
      this.#publishDialError(serving, endpoint, new Error(`invalid endpoint "${endpoint}"`));
      this.#refuse(serving, 'dial-failed', `invalid endpoint "${endpoint}"`);
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
    serving.info.activeClients.set(client, session);
    this.#count++;
    session.lastActive = this.#epoch;
    this.#log.debug(`new UDP session ${client} -> ${endpoint} for ${serving.name}`);
    if (channels.udpSessionOpen.hasSubscribers) {
      const message: UdpSessionMessage = {
        service: serving.name,
        protocol: 'UDP',
        client,
        endpoint,
      };
      channels.udpSessionOpen.publish(message);
    }
    if (this.#wheel === undefined) {
      this.#wheel = setInterval(this.#tick, this.#tickMs);
      this.#wheel.unref();
    }
    session.start();
    return session.open ? session : undefined;
  }

  readonly #tick = (): void => {
    const epoch = ++this.#epoch;
    for (const byPort of this.#sessions.values()) {
      for (const session of byPort.values()) {
        if (epoch - session.lastActive > WHEEL_SLOTS) session.close('idle');
      }
    }
    if (this.#count === 0) {
      clearInterval(this.#wheel);
      this.#wheel = undefined;
    }
  };

  /** A reply goes out from the Service's socket, so the client sees the address it sent to. */
  #reply(session: UdpSession, datagram: Buffer): void {
    if (this.#closed !== undefined) return;
    session.lastActive = this.#epoch;
    try {
      this.#socket.send(datagram, session.clientPort, session.clientAddress);
    } catch (error) {
      this.#logError(`reply to ${session.client} failed: ${String(error)}`);
    }
  }

  #dialFailed(session: UdpSession, error: Error): void {
    const serving = this.#serving;
    if (serving === undefined) return;
    this.#publishDialError(serving, session.endpoint, error);
    this.#refuse(serving, 'dial-failed', `${session.endpoint}: ${error.message}`);
  }

  #ended(session: UdpSession, reason: UdpSessionEndReason, error?: Error): void {
    const byPort = this.#sessions.get(session.clientAddress);
    if (byPort?.get(session.clientPort) !== session) return;
    byPort.delete(session.clientPort);
    if (byPort.size === 0) this.#sessions.delete(session.clientAddress);
    this.#count--;
    const serving = this.#serving;
    if (serving === undefined) return;
    if (serving.info.activeClients.get(session.client) === session) {
      serving.info.activeClients.delete(session.client);
    }
    if (reason === 'error' && this.#closed === undefined && session.datagramsIn > 0) {
      if (this.#resetAffinity.size < this.#opts.maxUdpSessions)
        this.#resetAffinity.add(session.client);
    }
    const detail = error === undefined ? reason : `${reason}: ${error.message}`;
    this.#log.debug(`UDP session ${session.client} -> ${session.endpoint} ended (${detail})`);
    if (channels.udpSessionClose.hasSubscribers) {
      const message: UdpSessionCloseMessage = {
        service: serving.name,
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

  #refuse(serving: Serving, reason: RefusedMessage['reason'], detail: string): void {
    if (channels.refused.hasSubscribers) {
      const message: RefusedMessage = { service: serving.name, protocol: 'UDP', reason };
      channels.refused.publish(message);
    }
    const suppressed = this.#refusalLog.take();
    if (suppressed < 0) return;
    const more = suppressed > 0 ? ` (${suppressed} more dropped since the last report)` : '';
    this.#log.warn(`dropping a datagram for ${serving.name} (${reason}): ${detail}${more}`);
  }

  #publishDialError(serving: Serving, endpoint: string, error: Error): void {
    if (!channels.dialError.hasSubscribers) return;
    const message: DialErrorMessage = { service: serving.name, protocol: 'UDP', endpoint, error };
    channels.dialError.publish(message);
  }

  #logError(line: string): void {
    const suppressed = this.#errorLog.take();
    if (suppressed >= 0) {
      this.#log.warn(suppressed > 0 ? `${line} (${suppressed} similar suppressed)` : line);
    }
  }

  /** A receive error (ICMP feedback, ENOBUFS) on the Service socket: log it and keep serving. */
  readonly #onSocketError = (error: Error): void => {
    this.#logError(`${this.#describe()}: ${error.message}`);
  };
}

function bindSocket(
  createSocket: ((options: dgram.SocketOptions) => dgram.Socket) | undefined,
  type: 'udp4' | 'udp6',
  address: string,
  port: number,
  bufferBytes: number,
): Promise<dgram.Socket> {
  const make = createSocket ?? dgram.createSocket;
  const socket = make(
    bufferBytes > 0
      ? { type, recvBufferSize: bufferBytes, sendBufferSize: bufferBytes }
      : { type, recvBufferSize: DEFAULT_UDP_SERVICE_RECEIVE_BUFFER_BYTES },
  );
  return new Promise((resolve, reject) => {
    const onError = (error: Error): void => {
      try {
        socket.close();
      } catch {
        // Never bound: nothing to close.
      }
      reject(error);
    };
    socket.once('error', onError);
    socket.bind({ address, port, exclusive: true }, () => {
      socket.removeListener('error', onError);
      resolve(socket);
    });
  });
}
