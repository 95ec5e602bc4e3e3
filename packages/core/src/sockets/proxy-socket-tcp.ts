// Longer than 400 lines because one class holds the listener: its accept path, its back-off after
// accept errors and the callbacks of its connections share private state (made on demand to keep
// an idle listener small) that splitting the class would have to expose.
import net from 'node:net';
import {
  type AcceptErrorMessage,
  type ConnectionCloseMessage,
  type ConnectionOpenMessage,
  channels,
  type RefusedMessage,
  type RelayReadPath,
} from '../diagnostics.js';
import type { Addr } from '../model/model.js';
import type { ServiceInfo } from '../model/service-info.js';
import { servicePortNameString } from '../model/service-port-name.js';
import { AcceptBackoff } from './accept-backoff.js';
import {
  type AcceptPolicy,
  type AcceptPolicyFactory,
  type AcceptVerdict,
  PROXY_EVERY_CONNECTION,
} from './accept-policy.js';
import type { DialOptions } from './dial-endpoints.js';
import { ListeningSocket } from './listening-socket.js';
import { LogLimiter } from './log-limiter.js';
import type { ProxySocketContext } from './proxy-socket.js';
import {
  type ProxySocketOptions,
  type ResolvedProxySocketOptions,
  resolveProxySocketOptions,
} from './proxy-socket-options.js';
import { isNoEndpointsError, refusalReason } from './refusal.js';
import { TcpConnection } from './tcp-connection.js';
import { setListenerOptions } from './tcp-listener-options.js';
import { adoptAcceptedSocket } from './tcp-read-path.js';
import { ignoreError, RELAY_ONREAD, type TcpRelayOptions } from './tcp-relay.js';

/**
 * Connections accepted before `proxyLoop` starts wait (paused) in a queue of this size; later ones
 * are closed at once. It covers the short gap between opening a socket and serving it, and bounds
 * what a socket that only holds a port (a node-port claim, never served) can accumulate.
 */
const MAX_CONNECTIONS_BEFORE_PROXY_LOOP = 64;

/** Options of {@link TcpProxySocket.open}: the tuning options plus injection points. */
export interface TcpProxySocketOptions extends ProxySocketOptions {
  /**
   * Decides per accepted connection: proxy now, hold, or refuse. Made once per socket from its
   * context. Default: proxy every connection (today's behaviour, with no cost per connection).
   */
  acceptPolicy?: AcceptPolicyFactory;
  /** Dials an endpoint. It must pass `options` on (they carry the relay's read buffers). Default `net.connect`. */
  connect?: (options: net.TcpNetConnectOpts) => net.Socket;
  /** Makes the listener. Default `net.createServer`; tests use it to reach the server. */
  createServer?: (options: net.ServerOpts) => net.Server;
}

/** Read paths already reported in this process: a fallback is logged once, counted always. */
const reportedFallbacks = new Set<string>();

/**
 * What every socket opened with one options object shares: the resolved options and the dial
 * function. Resolved once per options object (a factory passes the same one to each of its sockets)
 * instead of once per socket: 10 000 listeners held 10 000 equal copies (about 100 bytes each).
 */
interface SharedSettings {
  readonly opts: ResolvedProxySocketOptions;
  readonly connect: (options: net.TcpNetConnectOpts) => net.Socket;
}

const settingsByOptions = new WeakMap<TcpProxySocketOptions, SharedSettings>();

function sharedSettings(opts: TcpProxySocketOptions): SharedSettings {
  let settings = settingsByOptions.get(opts);
  if (settings === undefined) {
    const resolved = resolveProxySocketOptions(opts);
    Object.freeze(resolved.dialTimeoutsMs);
    settings = Object.freeze({
      opts: Object.freeze(resolved),
      connect: opts.connect ?? net.connect,
    });
    settingsByOptions.set(opts, settings);
  }
  return settings;
}

/** The listener's owner, on the Server itself, so its event handlers are shared functions. */
const kOwner = Symbol('userspace-proxy:tcp-proxy-socket');
type OwnedServer = net.Server & { [kOwner]?: TcpProxySocket };

/**
 * What only a listener whose accept failed or whose dials fail needs: made on the first failure.
 * An idle listener had two LogLimiters and an AcceptBackoff of its own (about 150 bytes).
 */
interface TroubleState {
  readonly backoff: AcceptBackoff;
  readonly refusalLog: LogLimiter;
  readonly acceptErrorLog: LogLimiter;
  recovering: boolean;
  resumeTimer: NodeJS.Timeout | undefined;
}

/**
 * The default TCP proxy socket. Every accepted connection dials its endpoint on its own, so the
 * accept path never waits on a dial (the reference dialled inside its accept loop: one dead
 * endpoint stalled every client of the Service for up to 3.75 s, kubernetes#12242, #47122). The
 * listener uses `pauseOnConnect`: nothing is read before the accept policy decides; then a proxied
 * client is read while it dials (a few KiB, {@link TcpConnection.dial}), a held one into its hold
 * buffer. Accept failures (EMFILE…) pause accepting with a doubling back-off instead of crashing
 * (quirk 12, kubernetes#16079). Members tagged `@internal` are tcp-connection.ts's callbacks.
 *
 * Built to be small while idle, because a cluster proxy holds one per Service port (10 000 and
 * more): the options are shared by every socket of one options object, the listener's events go to
 * functions shared by every socket (the socket is found through a property of its Server), and the
 * dial and relay options, the back-off and the log limiters are made on first use.
 */
export class TcpProxySocket extends ListeningSocket {
  readonly #server: OwnedServer;
  readonly #port: number;
  readonly #settings: SharedSettings;
  readonly #policy: AcceptPolicy;
  #name: string | undefined;
  #dialOptions: DialOptions | undefined;
  #relayOptions: TcpRelayOptions | undefined;
  #connectEndpoint: ((target: { host: string; port: number }) => net.Socket) | undefined;
  #trouble: TroubleState | undefined;
  #pending: net.Socket[] | undefined;
  #state: 'listening' | 'paused' | 'closed' = 'listening';
  #serving = false;

  /**
   * Binds the context's address and port (0: the OS picks) and resolves once listening.
   * @throws InvalidOptionError for a bad option; the listen error itself (EADDRINUSE…), which the
   * factory wraps in SocketOpenError.
   */
  static async open(
    context: ProxySocketContext,
    opts: TcpProxySocketOptions = {},
  ): Promise<TcpProxySocket> {
    const settings = sharedSettings(opts);
    const resolved = settings.opts;
    const createServer = opts.createServer ?? net.createServer;
    const server = createServer({
      pauseOnConnect: true,
      allowHalfOpen: true,
      noDelay: true,
      keepAlive: resolved.keepAliveMs > 0,
      keepAliveInitialDelay: resolved.keepAliveMs,
    });
    const host = context.ip ?? undefined;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host, port: context.port }, () => {
        server.removeListener('error', reject);
        resolve();
      });
    });
    setListenerOptions(server, resolved.keepAliveMs);
    const bound = server.address() as net.AddressInfo;
    const addr: Addr = {
      // The context's string when equal: one IP string per listener fewer to keep.
      address: bound.address === context.ip ? context.ip : bound.address,
      port: bound.port,
      family: bound.family === 'IPv6' ? 'IPv6' : 'IPv4',
    };
    let policy: AcceptPolicy = PROXY_EVERY_CONNECTION;
    if (opts.acceptPolicy !== undefined) {
      try {
        policy = opts.acceptPolicy(context);
      } catch (error) {
        server.close();
        throw error;
      }
    }
    return new TcpProxySocket(context, server, addr, settings, policy);
  }

  private constructor(
    context: ProxySocketContext,
    server: net.Server,
    addr: Addr,
    settings: SharedSettings,
    policy: AcceptPolicy,
  ) {
    super(context, addr, 'TCP');
    this.#server = server;
    this.#port = addr.port;
    this.#settings = settings;
    this.#policy = policy;
    (server as OwnedServer)[kOwner] = this;
    server.on('connection', TcpProxySocket.#onConnectionEvent);
    server.on('error', TcpProxySocket.#onServerErrorEvent);
    server.on('listening', TcpProxySocket.#onListeningEvent);
  }

  /** @internal TcpConnectionOwner: the Service port the connections balance over. */
  get service(): ProxySocketContext['servicePort'] {
    return this.context.servicePort;
  }

  /** @internal TcpConnectionOwner: the balancer that picks each connection's endpoint. */
  get lb(): ProxySocketContext['loadBalancer'] {
    return this.context.loadBalancer;
  }

  /** @internal TcpConnectionOwner: a held client's buffer limit. */
  get holdBufferBytes(): number {
    return this.#settings.opts.holdBufferBytes;
  }

  /** @internal TcpConnectionOwner: made with the first connection. */
  get dialOptions(): DialOptions {
    this.#dialOptions ??= {
      timeoutsMs: this.#settings.opts.dialTimeoutsMs,
      logger: this.log,
      name: this.#serviceName(),
    };
    return this.#dialOptions;
  }

  /** @internal TcpConnectionOwner: made with the first connection. */
  get relayOptions(): TcpRelayOptions {
    const opts = this.#settings.opts;
    this.#relayOptions ??= {
      idleTimeoutMs: opts.idleTimeoutMs,
      halfCloseTimeoutMs: opts.halfCloseTimeoutMs,
      onClose: (relay) => this.#onRelayClose(relay as TcpConnection),
    };
    return this.#relayOptions;
  }

  /** "ns/name:port" for messages, made on first use (an idle listener never logs it). */
  #serviceName(): string {
    this.#name ??= servicePortNameString(this.context.servicePort);
    return this.#name;
  }

  #troubleState(): TroubleState {
    this.#trouble ??= {
      backoff: new AcceptBackoff(this.#settings.opts.acceptBackoffMs),
      refusalLog: new LogLimiter(),
      acceptErrorLog: new LogLimiter(1000),
      recovering: false,
      resumeTimer: undefined,
    };
    return this.#trouble;
  }

  protected serve(_info: ServiceInfo): void {
    this.#serving = true;
    // Not #serviceName(): a line below the logger's level must not leave a name behind.
    this.log.debug(
      `proxying ${servicePortNameString(this.context.servicePort)} on ${this.describe()}`,
    );
    const pending = this.#pending;
    this.#pending = undefined;
    for (const raw of pending ?? []) {
      if (!raw.destroyed) this.#handle(raw);
    }
  }

  protected shutdown(): Promise<void> {
    const wasListening = this.#state === 'listening';
    this.#state = 'closed';
    clearTimeout(this.#trouble?.resumeTimer);
    // The listening descriptor is closed synchronously; established connections carry on.
    if (wasListening) this.#server.close();
    const pending = this.#pending;
    this.#pending = undefined;
    for (const raw of pending ?? []) raw.destroy();
    try {
      this.#policy.close?.();
    } catch (error) {
      this.log.error(`the accept policy of ${this.#serviceName()} failed to close`, error);
    }
    return Promise.resolve();
  }

  protected closing(): Promise<void> {
    return Promise.resolve();
  }

  /**
   * @internal TcpConnectionOwner: one dial attempt (keep-alive set by `dialed`); one function per
   * socket, made with its first connection.
   */
  get connectEndpoint(): (target: { host: string; port: number }) => net.Socket {
    const connect = this.#settings.connect;
    this.#connectEndpoint ??= (target) =>
      connect({
        host: target.host,
        port: target.port,
        noDelay: true,
        allowHalfOpen: true,
        onread: RELAY_ONREAD,
      });
    return this.#connectEndpoint;
  }

  /** @internal TcpConnectionOwner: the client leg on the copy-free read path (fallbacks told). */
  adopt(raw: net.Socket): { socket: net.Socket; usesOnread: boolean } {
    const adopted = adoptAcceptedSocket(raw, RELAY_ONREAD);
    if (adopted.path !== 'in-place' && !raw.destroyed) this.#fallback('client', adopted.path);
    return adopted;
  }

  // The listener's events, shared by every socket: `this` is the Server, its owner a property of it.
  static readonly #onConnectionEvent = function (this: OwnedServer, raw: net.Socket): void {
    const owner = this[kOwner];
    if (owner === undefined) raw.destroy();
    else owner.#onConnection(raw);
  };

  static readonly #onServerErrorEvent = function (
    this: OwnedServer,
    error: NodeJS.ErrnoException,
  ): void {
    const owner = this[kOwner];
    if (owner !== undefined) owner.#onServerError(error);
  };

  static readonly #onListeningEvent = function (this: OwnedServer): void {
    const owner = this[kOwner];
    if (owner !== undefined) owner.#onListening();
  };

  #onConnection(raw: net.Socket): void {
    const trouble = this.#trouble;
    if (trouble?.recovering) {
      trouble.recovering = false;
      trouble.backoff.reset();
    }
    if (this.#state === 'closed') {
      raw.destroy();
      return;
    }
    if (!this.#serving) {
      this.#pending ??= [];
      if (this.#pending.length < MAX_CONNECTIONS_BEFORE_PROXY_LOOP) {
        raw.on('error', ignoreError);
        this.#pending.push(raw);
      } else {
        raw.destroy();
      }
      return;
    }
    this.#handle(raw);
  }

  #handle(raw: net.Socket): void {
    if (this.info?.isAlive() === false) {
      raw.destroy();
      void this.close();
      return;
    }
    if (this.filtersSources && !this.admitted(raw.remoteAddress)) return void raw.destroy();
    const { maxConnections } = this.#settings.opts;
    if (maxConnections > 0 && this.activeConnections() >= maxConnections) {
      raw.destroy();
      this.log.debug(
        `refusing a client of ${this.#serviceName()}: ${maxConnections} connections open`,
      );
      this.#publishRefused('connection-limit');
      return;
    }
    this.connectionOpened();
    const conn = new TcpConnection(this, raw);
    const verdict = this.#policy === PROXY_EVERY_CONNECTION ? 'proxy' : this.#verdict(conn);
    if (verdict === 'proxy') conn.dial();
    else if (verdict === 'hold') conn.hold();
    else conn.refuse();
  }

  #verdict(conn: TcpConnection): AcceptVerdict {
    try {
      const verdict = this.#policy.accept(conn);
      if (verdict === 'proxy' || verdict === 'hold' || verdict === 'refuse') return verdict;
      this.log.error(
        `the accept policy of ${this.#serviceName()} answered ${String(verdict)}; refusing`,
      );
    } catch (error) {
      this.log.error(
        `the accept policy of ${this.#serviceName()} failed; refusing the client`,
        error,
      );
    }
    return 'refuse';
  }

  /** @internal TcpConnectionOwner: a connection's dial ended: relay it, or close its client. */
  dialed(conn: TcpConnection, error: unknown, backend?: net.Socket, ep?: string): void {
    if (backend === undefined) {
      conn.client.destroy();
      conn.abandon();
      this.#onDialFailed(error);
      conn.markClosed();
      return;
    }
    conn.endpoint = ep ?? '';
    this.proxyHeader?.(conn, backend, this.info); // the PROXY header, before any client byte
    // Relaying first (the bytes read while dialling go out now); keep-alive's four setsockopt(2)
    // and the message's getpeername(2) run while the endpoint answers. `relay` never ends
    // synchronously, so connectionOpen still comes before connectionClose.
    conn.relay(backend);
    const keepAliveMs = this.#settings.opts.keepAliveMs;
    if (keepAliveMs > 0 && !backend.destroyed) backend.setKeepAlive(true, keepAliveMs);
    if (!conn.backendUsesOnread) this.#fallback('endpoint', 'data-events');
    if (channels.connectionOpen.hasSubscribers) {
      const message: ConnectionOpenMessage = {
        service: this.#serviceName(),
        protocol: 'TCP',
        client: conn.toString(),
        endpoint: conn.endpoint,
      };
      channels.connectionOpen.publish(message);
    }
  }

  /** @internal TcpConnectionOwner: the policy refused `conn`. */
  refused(_conn: TcpConnection, detail: string): void {
    this.#publishRefused('policy', detail);
  }

  /** @internal TcpConnectionOwner: `conn` is gone. */
  ended(_conn: TcpConnection): void {
    this.connectionClosed();
  }

  #onDialFailed(error: unknown): void {
    this.#publishRefused(refusalReason(error));
    const suppressed = this.#troubleState().refusalLog.take();
    if (suppressed < 0) return;
    const more = suppressed > 0 ? ` (${suppressed} similar suppressed)` : '';
    const cause =
      error instanceof Error && error.cause !== undefined ? `: ${String(error.cause)}` : '';
    const line = `failed to connect a client of ${this.#serviceName()} to an endpoint: ${String(error)}${cause}${more}`;
    if (isNoEndpointsError(error)) this.log.debug(line);
    else this.log.warn(line);
  }

  #publishRefused(reason: RefusedMessage['reason'], detail?: string): void {
    if (!channels.refused.hasSubscribers) return;
    const message: RefusedMessage = { service: this.#serviceName(), protocol: 'TCP', reason };
    if (detail !== undefined) message.detail = detail;
    channels.refused.publish(message);
  }

  #fallback(leg: 'client' | 'endpoint', path: Exclude<RelayReadPath, 'in-place'>): void {
    if (channels.relayFallback.hasSubscribers) channels.relayFallback.publish({ leg, path });
    const key = `${leg}:${path}`;
    if (reportedFallbacks.has(key)) return;
    reportedFallbacks.add(key);
    this.log.warn(
      `the ${leg} leg of ${this.#serviceName()} reads through ${path}, not the copy-free path: ` +
        `relaying costs more CPU (reported once per process; see relayReadPathCounts())`,
    );
  }

  #onRelayClose(conn: TcpConnection): void {
    if (channels.connectionClose.hasSubscribers) {
      const message: ConnectionCloseMessage = {
        service: this.#serviceName(),
        protocol: 'TCP',
        endpoint: conn.endpoint,
        bytesIn: conn.bytesIn,
        bytesOut: conn.bytesOut,
        durationMs: performance.now() - conn.acceptedAt,
      };
      channels.connectionClose.publish(message);
    }
    conn.markClosed();
  }

  /**
   * libuv sheds load on EMFILE by itself (it accepts and closes pending connections with a spare
   * descriptor), so Node reports an accept error only when that fails or for other errors; it then
   * retries accept() in a tight loop until the listener is closed. Closing the listener is the only
   * way to pause it: we close it and listen again on the same address after the back-off. Clients
   * are refused (RST) meanwhile, which is what they would see from an overloaded host anyway.
   */
  #onServerError(error: NodeJS.ErrnoException): void {
    if (this.#state === 'closed') return;
    const trouble = this.#troubleState();
    const delay = trouble.backoff.next();
    if (error.syscall === 'accept' || this.#state === 'listening') {
      if (channels.acceptError.hasSubscribers) {
        const message: AcceptErrorMessage = {
          service: this.#serviceName(),
          protocol: 'TCP',
          error,
        };
        channels.acceptError.publish(message);
      }
      if (trouble.acceptErrorLog.take() >= 0) {
        this.log.warn(
          `accept failed on ${this.describe()}: ${error.message}; pausing for ${delay} ms`,
        );
      }
    } else {
      this.log.warn(
        `listening again on ${this.describe()} failed: ${error.message}; retrying in ${delay} ms`,
      );
    }
    this.#state = 'paused';
    trouble.recovering = true;
    if (this.#server.listening) this.#server.close();
    clearTimeout(trouble.resumeTimer);
    trouble.resumeTimer = setTimeout(() => this.#resume(), delay);
  }

  #resume(): void {
    if (this.#state !== 'paused') return;
    this.#server.listen({ host: this.context.ip ?? undefined, port: this.#port });
  }

  #onListening(): void {
    if (this.#state === 'closed') {
      this.#server.close();
      return;
    }
    // Listening again after an accept error is a new listening socket.
    setListenerOptions(this.#server, this.#settings.opts.keepAliveMs);
    if (this.#state === 'paused') {
      this.#state = 'listening';
      this.log.info(`accepting again on ${this.describe()}`);
    }
  }
}
