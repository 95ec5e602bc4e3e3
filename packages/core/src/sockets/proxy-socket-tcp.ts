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
 * The default TCP proxy socket. Every accepted connection dials its endpoint on its own, so the
 * accept path never waits on a dial (the reference dialled inside its accept loop: one dead
 * endpoint stalled every client of the Service for up to 3.75 s, kubernetes#12242, #47122). The
 * listener uses `pauseOnConnect`: nothing is read before the accept policy decides; then a proxied
 * client is read while it dials (a few KiB, {@link TcpConnection.dial}), a held one into its hold
 * buffer. Accept failures (EMFILE…) pause accepting with a doubling back-off instead of crashing
 * (quirk 12, kubernetes#16079). Members tagged `@internal` are tcp-connection.ts's callbacks.
 */
export class TcpProxySocket extends ListeningSocket {
  readonly service: ProxySocketContext['servicePort'];
  readonly lb: ProxySocketContext['loadBalancer'];
  readonly dialOptions: DialOptions;
  readonly relayOptions: TcpRelayOptions;
  readonly holdBufferBytes: number;
  readonly #server: net.Server;
  readonly #host: string | undefined;
  readonly #port: number;
  readonly #name: string;
  readonly #opts: ResolvedProxySocketOptions;
  readonly #connect: (options: net.TcpNetConnectOpts) => net.Socket;
  readonly #policy: AcceptPolicy;
  readonly #backoff: AcceptBackoff;
  readonly #refusalLog = new LogLimiter();
  readonly #acceptErrorLog = new LogLimiter(1000);
  readonly #pending: net.Socket[] = [];
  #state: 'listening' | 'paused' | 'closed' = 'listening';
  #recovering = false;
  #resumeTimer: NodeJS.Timeout | undefined;
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
    const resolved = resolveProxySocketOptions(opts);
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
      address: bound.address,
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
    return new TcpProxySocket(context, server, addr, resolved, opts, policy);
  }

  private constructor(
    context: ProxySocketContext,
    server: net.Server,
    addr: Addr,
    opts: ResolvedProxySocketOptions,
    inject: TcpProxySocketOptions,
    policy: AcceptPolicy,
  ) {
    super(context, addr, 'TCP');
    this.#server = server;
    this.#host = context.ip ?? undefined;
    this.#port = addr.port;
    this.#opts = opts;
    this.#connect = inject.connect ?? net.connect;
    this.#policy = policy;
    this.#backoff = new AcceptBackoff(opts.acceptBackoffMs);
    this.service = context.servicePort;
    this.lb = context.loadBalancer;
    this.#name = servicePortNameString(context.servicePort);
    this.holdBufferBytes = opts.holdBufferBytes;
    this.dialOptions = { timeoutsMs: opts.dialTimeoutsMs, logger: this.log, name: this.#name };
    this.relayOptions = {
      idleTimeoutMs: opts.idleTimeoutMs,
      halfCloseTimeoutMs: opts.halfCloseTimeoutMs,
      onClose: (relay) => this.#onRelayClose(relay as TcpConnection),
    };
    server.on('connection', this.#onConnection);
    server.on('error', this.#onServerError);
    server.on('listening', this.#onListening);
  }

  protected serve(_info: ServiceInfo): void {
    this.#serving = true;
    this.log.debug(`proxying ${this.#name} on ${this.describe()}`);
    for (const raw of this.#pending.splice(0)) {
      if (!raw.destroyed) this.#handle(raw);
    }
  }

  protected shutdown(): Promise<void> {
    const wasListening = this.#state === 'listening';
    this.#state = 'closed';
    clearTimeout(this.#resumeTimer);
    // The listening descriptor is closed synchronously; established connections carry on.
    if (wasListening) this.#server.close();
    for (const raw of this.#pending.splice(0)) raw.destroy();
    try {
      this.#policy.close?.();
    } catch (error) {
      this.log.error(`the accept policy of ${this.#name} failed to close`, error);
    }
    return Promise.resolve();
  }

  protected closing(): Promise<void> {
    return Promise.resolve();
  }

  /** @internal TcpConnectionOwner: one dial attempt (keep-alive set by `dialed`); not a closure. */
  readonly connectEndpoint = (target: { host: string; port: number }): net.Socket =>
    this.#connect({
      host: target.host,
      port: target.port,
      noDelay: true,
      allowHalfOpen: true,
      onread: RELAY_ONREAD,
    });

  /** @internal TcpConnectionOwner: the client leg on the copy-free read path (fallbacks told). */
  adopt(raw: net.Socket): { socket: net.Socket; usesOnread: boolean } {
    const adopted = adoptAcceptedSocket(raw, RELAY_ONREAD);
    if (adopted.path !== 'in-place' && !raw.destroyed) this.#fallback('client', adopted.path);
    return adopted;
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
    if (!this.#serving) {
      if (this.#pending.length < MAX_CONNECTIONS_BEFORE_PROXY_LOOP) {
        raw.on('error', ignoreError);
        this.#pending.push(raw);
      } else {
        raw.destroy();
      }
      return;
    }
    this.#handle(raw);
  };

  #handle(raw: net.Socket): void {
    if (this.info?.isAlive() === false) {
      raw.destroy();
      void this.close();
      return;
    }
    if (this.filtersSources && !this.admitted(raw.remoteAddress)) return void raw.destroy();
    const { maxConnections } = this.#opts;
    if (maxConnections > 0 && this.activeConnections() >= maxConnections) {
      raw.destroy();
      this.log.debug(`refusing a client of ${this.#name}: ${maxConnections} connections open`);
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
      this.log.error(`the accept policy of ${this.#name} answered ${String(verdict)}; refusing`);
    } catch (error) {
      this.log.error(`the accept policy of ${this.#name} failed; refusing the client`, error);
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
    const keepAliveMs = this.#opts.keepAliveMs;
    if (keepAliveMs > 0 && !backend.destroyed) backend.setKeepAlive(true, keepAliveMs);
    if (!conn.backendUsesOnread) this.#fallback('endpoint', 'data-events');
    if (channels.connectionOpen.hasSubscribers) {
      const message: ConnectionOpenMessage = {
        service: this.#name,
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
    const suppressed = this.#refusalLog.take();
    if (suppressed < 0) return;
    const more = suppressed > 0 ? ` (${suppressed} similar suppressed)` : '';
    const cause =
      error instanceof Error && error.cause !== undefined ? `: ${String(error.cause)}` : '';
    const line = `failed to connect a client of ${this.#name} to an endpoint: ${String(error)}${cause}${more}`;
    if (isNoEndpointsError(error)) this.log.debug(line);
    else this.log.warn(line);
  }

  #publishRefused(reason: RefusedMessage['reason'], detail?: string): void {
    if (!channels.refused.hasSubscribers) return;
    const message: RefusedMessage = { service: this.#name, protocol: 'TCP', reason };
    if (detail !== undefined) message.detail = detail;
    channels.refused.publish(message);
  }

  #fallback(leg: 'client' | 'endpoint', path: Exclude<RelayReadPath, 'in-place'>): void {
    if (channels.relayFallback.hasSubscribers) channels.relayFallback.publish({ leg, path });
    const key = `${leg}:${path}`;
    if (reportedFallbacks.has(key)) return;
    reportedFallbacks.add(key);
    this.log.warn(
      `the ${leg} leg of ${this.#name} reads through ${path}, not the copy-free path: ` +
        `relaying costs more CPU (reported once per process; see relayReadPathCounts())`,
    );
  }

  #onRelayClose(conn: TcpConnection): void {
    if (channels.connectionClose.hasSubscribers) {
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
    conn.markClosed();
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
      if (channels.acceptError.hasSubscribers) {
        const message: AcceptErrorMessage = {
          service: this.#name,
          protocol: 'TCP',
          error,
        };
        channels.acceptError.publish(message);
      }
      if (this.#acceptErrorLog.take() >= 0) {
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
    this.#recovering = true;
    if (this.#server.listening) this.#server.close();
    clearTimeout(this.#resumeTimer);
    this.#resumeTimer = setTimeout(this.#resume, delay);
  };

  readonly #resume = (): void => {
    if (this.#state !== 'paused') return;
    this.#server.listen({ host: this.#host, port: this.#port });
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
      this.log.info(`accepting again on ${this.describe()}`);
    }
  };
}
