import net from 'node:net';
import {
  type AcceptErrorMessage,
  type ConnectionCloseMessage,
  type ConnectionOpenMessage,
  channels,
  type RefusedMessage,
} from '../diagnostics.js';
import { EndpointDialError, MissingEndpointsError, MissingServiceEntryError } from '../errors.js';
import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import { componentLogger, type Logger } from '../logger.js';
import type { Addr } from '../model/model.js';
import type { ServiceInfo } from '../model/service-info.js';
import {
  joinHostPort,
  type ServicePortName,
  servicePortNameString,
} from '../model/service-port-name.js';
import { AcceptBackoff } from './accept-backoff.js';
import { type DialClient, type DialOptions, dialEndpoints } from './dial-endpoints.js';
import { LogLimiter } from './log-limiter.js';
import type { ProxySocket } from './proxy-socket.js';
import {
  type ProxySocketOptions,
  type ResolvedProxySocketOptions,
  resolveProxySocketOptions,
} from './proxy-socket-options.js';
import {
  adoptAcceptedSocket,
  connectForRelay,
  ignoreError,
  RELAY_ONREAD,
  TcpRelay,
  type TcpRelayOptions,
} from './tcp-relay.js';

/**
 * Connections accepted before `proxyLoop` starts wait (paused) in a queue of this size; later ones
 * are closed at once. It covers the short gap between opening a socket and serving it, and bounds
 * what a socket that only holds a port (a node-port claim, never served) can accumulate.
 */
export const MAX_CONNECTIONS_BEFORE_PROXY_LOOP = 64;

/** Options of {@link TcpProxySocket.open}: the tuning options plus injection points. */
export interface TcpProxySocketOptions extends ProxySocketOptions {
  logger?: Logger;
  /** Dials an endpoint. It must pass `options` on (they carry the relay's read buffers). Default `net.connect`. */
  connect?: (options: net.TcpNetConnectOpts) => net.Socket;
  /** Makes the listener. Default `net.createServer`; tests use it to reach the server. */
  createServer?: (options: net.ServerOpts) => net.Server;
}

/** What every connection of one served Service port shares, made once in `proxyLoop`. */
interface Serving {
  service: ServicePortName;
  name: string;
  info: ServiceInfo;
  lb: LoadBalancer;
  dialOptions: DialOptions;
  relayOptions: TcpRelayOptions;
  /** Opens one dial attempt with the socket options and the relays' read buffers. */
  connect: (target: { host: string; port: number }) => net.Socket;
  dialed: (conn: ProxiedConnection, error: unknown, backend?: net.Socket, ep?: string) => void;
}

/**
 * The default TCP proxy socket. Every accepted connection dials its endpoint on its own, so the
 * accept path never waits on a dial (the reference dialled inside its accept loop: one dead
 * endpoint stalled every client of the Service for up to 3.75 s, kubernetes#12242, #47122). The
 * listener is created with `pauseOnConnect`, so nothing is read from a client before its backend is
 * connected. Accept failures (EMFILE and the like) pause accepting with a doubling back-off instead
 * of crashing (quirk 12, kubernetes#16079).
 */
export class TcpProxySocket implements ProxySocket {
  readonly #server: net.Server;
  readonly #host: string | undefined;
  readonly #requestedPort: number;
  readonly #addr: Addr;
  readonly #opts: ResolvedProxySocketOptions;
  readonly #connect: (options: net.TcpNetConnectOpts) => net.Socket;
  readonly #log: Logger;
  readonly #backoff: AcceptBackoff;
  readonly #refusalLog = new LogLimiter();
  readonly #acceptErrorLog = new LogLimiter(1000);
  readonly #pending: net.Socket[] = [];
  #state: 'listening' | 'paused' | 'closed' = 'listening';
  #recovering = false;
  #resumeTimer: NodeJS.Timeout | undefined;
  #serving: Serving | undefined;
  #active = 0;
  #loopDone: Promise<void>;
  #endLoop!: () => void;

  /**
   * Binds `ip` (all addresses when null) and `port` (0: the OS picks) and resolves once listening.
   * @throws InvalidOptionError for a bad option; the listen error itself (EADDRINUSE…), which the
   * factory wraps in SocketOpenError.
   */
  static async open(
    ip: string | null,
    port: number,
    opts: TcpProxySocketOptions = {},
  ): Promise<TcpProxySocket> {
    const resolved = resolveProxySocketOptions(opts);
    const createServer = opts.createServer ?? net.createServer;
    const server = createServer({
      pauseOnConnect: true,
      allowHalfOpen: true,
      noDelay: true,
      keepAlive: resolved.keepAliveMs > 0,
      keepAliveInitialDelay: resolved.keepAliveMs,
    });
    const host = ip ?? undefined;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host, port }, () => {
        server.removeListener('error', reject);
        resolve();
      });
    });
    setListenerOptions(server, resolved.keepAliveMs);
    return new TcpProxySocket(server, host, port, resolved, opts);
  }

  private constructor(
    server: net.Server,
    host: string | undefined,
    requestedPort: number,
    opts: ResolvedProxySocketOptions,
    inject: TcpProxySocketOptions,
  ) {
    this.#server = server;
    this.#host = host;
    this.#requestedPort = requestedPort;
    const bound = server.address() as net.AddressInfo;
    this.#addr = {
      address: bound.address,
      port: bound.port,
      family: bound.family === 'IPv6' ? 'IPv6' : 'IPv4',
    };
    this.#opts = opts;
    this.#connect = inject.connect ?? net.connect;
    this.#log = componentLogger(inject.logger, 'proxy-socket-tcp');
    this.#backoff = new AcceptBackoff(opts.acceptBackoffMs);
    this.#loopDone = new Promise((resolve) => {
      this.#endLoop = resolve;
    });
    server.on('connection', this.#onConnection);
    server.on('error', this.#onServerError);
    server.on('listening', this.#onListening);
  }

  /** The bound address (a copy); with port 0 asked for, the port the OS chose. */
  addr(): Addr {
    return { ...this.#addr };
  }

  /** The port asked for (0 when the OS chose), which is what the Proxier releases. */
  listenPort(): number {
    return this.#requestedPort;
  }

  /** Connections accepted and not yet fully closed, dialling ones included. */
  get activeConnections(): number {
    return this.#active;
  }

  /**
   * Starts serving `service`: connections held since `open` are served first. Resolves when the
   * socket is closed (or closes itself on finding `info.isAlive()` false); never rejects.
   */
  proxyLoop(service: ServicePortName, info: ServiceInfo, lb: LoadBalancer): Promise<void> {
    if (this.#serving !== undefined) {
      this.#log.warn(`proxyLoop called twice on ${this.#describe()}; ignoring the second call`);
      return this.#loopDone;
    }
    if (this.#state === 'closed') return this.#loopDone;
    const name = servicePortNameString(service);
    const { keepAliveMs, idleTimeoutMs, halfCloseTimeoutMs, dialTimeoutsMs } = this.#opts;
    const connect = this.#connect;
    this.#serving = {
      service,
      name,
      info,
      lb,
      dialOptions: { timeoutsMs: dialTimeoutsMs, logger: this.#log, name },
      relayOptions: {
        idleTimeoutMs,
        halfCloseTimeoutMs,
        onClose: (relay) => this.#onRelayClose(relay as ProxiedConnection),
      },
      connect: (target) =>
        connect({
          host: target.host,
          port: target.port,
          noDelay: true,
          keepAlive: keepAliveMs > 0,
          keepAliveInitialDelay: keepAliveMs,
          allowHalfOpen: true,
          onread: RELAY_ONREAD,
        }),
      dialed: (conn, error, backend, endpoint) => this.#dialed(conn, error, backend, endpoint),
    };
    this.#log.debug(`proxying ${name} on ${this.#describe()}`);
    for (const raw of this.#pending.splice(0)) {
      if (!raw.destroyed) this.#handle(raw, this.#serving);
    }
    return this.#loopDone;
  }

  /** Stops accepting (idempotent); established connections carry on. */
  close(): Promise<void> {
    if (this.#state !== 'closed') {
      const wasListening = this.#state === 'listening';
      this.#state = 'closed';
      clearTimeout(this.#resumeTimer);
      // The listening descriptor is closed synchronously; established connections carry on.
      if (wasListening) this.#server.close();
      for (const raw of this.#pending.splice(0)) raw.destroy();
      this.#log.debug(`closed ${this.#describe()}`);
      this.#endLoop();
    }
    return Promise.resolve();
  }

  #describe(): string {
    return `${joinHostPort(this.#addr.address, this.#addr.port)}/TCP`;
  }

  readonly #onConnection = (raw: net.Socket): void => {
    if (this.#recovering) {
      this.#recovering = false;
      this.#backoff.reset();
    }
    if (this.#state === 'closed') {
      raw.destroy();
      return;
    }
    const serving = this.#serving;
    if (serving === undefined) {
      if (this.#pending.length < MAX_CONNECTIONS_BEFORE_PROXY_LOOP) {
        raw.on('error', ignoreError);
        this.#pending.push(raw);
      } else {
        raw.destroy();
      }
      return;
    }
    this.#handle(raw, serving);
  };

  #handle(raw: net.Socket, serving: Serving): void {
    if (!serving.info.isAlive()) {
      raw.destroy();
      void this.close();
      return;
    }
    const { maxConnections } = this.#opts;
    if (maxConnections > 0 && this.#active >= maxConnections) {
      raw.destroy();
      this.#log.debug(`refusing a client of ${serving.name}: ${maxConnections} connections open`);
      this.#publishRefused(serving, 'connection-limit');
      return;
    }
    this.#active++;
    const adopted = adoptAcceptedSocket(raw, RELAY_ONREAD);
    adopted.socket.on('error', ignoreError);
    const conn = new ProxiedConnection(serving, adopted.socket, adopted.usesOnread);
    dialEndpoints(serving.service, conn, 'TCP', serving.lb, serving.dialOptions, conn);
  }

  /** A connection's dial ended: relay it, or close its client. */
  #dialed(conn: ProxiedConnection, error: unknown, backend?: net.Socket, ep?: string): void {
    const serving = conn.serving;
    if (backend === undefined) {
      this.#active--;
      conn.client.destroy();
      conn.abandon();
      this.#onDialFailed(serving, error);
      return;
    }
    conn.endpoint = ep ?? '';
    if (channels.connectionOpen.hasSubscribers) {
      const message: ConnectionOpenMessage = {
        service: serving.name,
        protocol: 'TCP',
        client: conn.toString(),
        endpoint: conn.endpoint,
      };
      channels.connectionOpen.publish(message);
    }
    conn.start(conn.client, backend, {
      client: conn.clientUsesOnread,
      backend: conn.backendUsesOnread,
    });
  }

  #onDialFailed(serving: Serving, error: unknown): void {
    const noEndpoints =
      error instanceof MissingEndpointsError || error instanceof MissingServiceEntryError;
    const reason = noEndpoints
      ? 'no-endpoints'
      : error instanceof EndpointDialError
        ? 'dial-failed'
        : 'other';
    this.#publishRefused(serving, reason);
    const suppressed = this.#refusalLog.take();
    if (suppressed < 0) return;
    const more = suppressed > 0 ? ` (${suppressed} similar suppressed)` : '';
    const cause =
      error instanceof Error && error.cause !== undefined ? `: ${String(error.cause)}` : '';
    const line = `failed to connect a client of ${serving.name} to an endpoint: ${String(error)}${cause}${more}`;
    if (noEndpoints) this.#log.debug(line);
    else this.#log.warn(line);
  }

  #publishRefused(serving: Serving, reason: RefusedMessage['reason']): void {
    if (!channels.refused.hasSubscribers) return;
    const message: RefusedMessage = { service: serving.name, protocol: 'TCP', reason };
    channels.refused.publish(message);
  }

  #onRelayClose(conn: ProxiedConnection): void {
    this.#active--;
    if (channels.connectionClose.hasSubscribers) {
      const message: ConnectionCloseMessage = {
        service: conn.serving.name,
        protocol: 'TCP',
        endpoint: conn.endpoint,
        bytesIn: conn.bytesIn,
        bytesOut: conn.bytesOut,
        durationMs: performance.now() - conn.opened,
      };
      channels.connectionClose.publish(message);
    }
  }

  /**
   * libuv sheds load on EMFILE by itself (it accepts and closes pending connections with a spare
   * descriptor), so Node reports an accept error only when that fails or for other errors; it then
   * retries accept() in a tight loop until the listener is closed. Closing the listener is the only
   * way to pause it: we close it and listen again on the same address after the back-off. Clients
   * are refused (RST) meanwhile, which is what they would see from an overloaded host anyway.
   */
  readonly #onServerError = (error: NodeJS.ErrnoException): void => {
    if (this.#state === 'closed') return;
    const delay = this.#backoff.next();
    if (error.syscall === 'accept' || this.#state === 'listening') {
      const serving = this.#serving;
      if (channels.acceptError.hasSubscribers) {
        const message: AcceptErrorMessage = {
          service: serving?.name ?? '',
          protocol: 'TCP',
          error,
        };
        channels.acceptError.publish(message);
      }
      if (this.#acceptErrorLog.take() >= 0) {
        this.#log.warn(
          `accept failed on ${this.#describe()}: ${error.message}; pausing for ${delay} ms`,
        );
      }
    } else {
      this.#log.warn(
        `listening again on ${this.#describe()} failed: ${error.message}; retrying in ${delay} ms`,
      );
    }
    this.#state = 'paused';
    this.#recovering = true;
    if (this.#server.listening) this.#server.close();
    clearTimeout(this.#resumeTimer);
    this.#resumeTimer = setTimeout(this.#resume, delay);
  };

  readonly #resume = (): void => {
    if (this.#state !== 'paused') return;
    this.#server.listen({ host: this.#host, port: this.#addr.port });
  };

  readonly #onListening = (): void => {
    if (this.#state === 'closed') {
      this.#server.close();
      return;
    }
    // Listening again after an accept error is a new listening socket.
    setListenerOptions(this.#server, this.#opts.keepAliveMs);
    if (this.#state === 'paused') {
      this.#state = 'listening';
      this.#log.info(`accepting again on ${this.#describe()}`);
    }
  };
}

/** What `net.Server` keeps its listening socket's TCP handle as. */
interface ListenHandle {
  setNoDelay?: (enable: boolean) => number;
  setKeepAlive?: (enable: boolean, delaySeconds: number) => number;
}

/**
 * On Linux an accepted socket is a clone of its listener and inherits TCP_NODELAY and the
 * keep-alive settings, so they are set once on the listening socket, and `net.Server` is told not
 * to set them again on every accepted socket: five setsockopt(2) calls per connection saved (libuv
 * sets keep-alive with four), about 2 % of the proxy's CPU per new connection. Elsewhere, or if the
 * handle refuses, Node keeps setting them per connection, as the server options say.
 */
function setListenerOptions(server: net.Server, keepAliveMs: number): void {
  if (process.platform !== 'linux') return;
  const options = server as unknown as { noDelay?: boolean; keepAlive?: boolean };
  const handle = (server as unknown as { _handle?: ListenHandle | null })._handle;
  const inherited =
    handle != null &&
    typeof handle.setNoDelay === 'function' &&
    typeof handle.setKeepAlive === 'function' &&
    handle.setNoDelay(true) === 0 &&
    (keepAliveMs <= 0 || handle.setKeepAlive(true, Math.floor(keepAliveMs / 1000)) === 0);
  options.noDelay = !inherited;
  options.keepAlive = !inherited && keepAliveMs > 0;
}

/**
 * One proxied connection: its relay, the client's address (read from the socket only when someone
 * asks: a round-robin balancer without ClientIP affinity never does, which saves a getpeername(2)
 * per connection; an address that can no longer be read reads as ""), and the dialler of its
 * backend. One object instead of a relay, an address, an options object and a handful of closures,
 * because an idle connection costs what its objects cost.
 */
class ProxiedConnection extends TcpRelay implements Addr, DialClient {
  readonly serving: Serving;
  readonly client: net.Socket;
  readonly clientUsesOnread: boolean;
  backendUsesOnread = false;
  endpoint = '';
  readonly opened = performance.now();
  #address: string | undefined;
  #port = 0;

  constructor(serving: Serving, client: net.Socket, clientUsesOnread: boolean) {
    super(serving.relayOptions);
    this.serving = serving;
    this.client = client;
    this.clientUsesOnread = clientUsesOnread;
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

  override toString(): string {
    return this.address === '' ? '' : joinHostPort(this.address, this.port);
  }

  connect(target: { host: string; port: number }): net.Socket {
    const { socket, usesOnread } = connectForRelay(this.serving.connect, target);
    this.backendUsesOnread = usesOnread;
    return socket;
  }

  dialed(error: unknown, socket?: net.Socket, endpoint?: string): void {
    this.serving.dialed(this, error, socket, endpoint);
  }
}
