import { channels, type RefusedMessage } from '../diagnostics.js';
import type { Logger } from '../logger.js';
import type { Addr, Protocol } from '../model/model.js';
import type { ServiceInfo } from '../model/service-info.js';
import { joinHostPort, servicePortNameString } from '../model/service-port-name.js';
import { LiveConnections } from './live-connections.js';
import { type ProxyHeaderWriter, proxyHeaderWriter } from './proxy-protocol.js';
import type { ProxySocket, ProxySocketContext } from './proxy-socket.js';
import { sourceRangeCheck } from './source-ranges.js';

/**
 * What the default TCP and UDP sockets share: the bound address, the port asked for, the loop
 * promise and the once-only `proxyLoop`, and the count of live connections that `idle()` waits on.
 * A subclass binds, then calls `super` with what it bound, and implements `serve` and `shutdown`.
 */
export abstract class ListeningSocket implements ProxySocket {
  /** What the socket was made with. */
  protected readonly context: ProxySocketContext;
  /**
   * The connections a subclass links in (the TCP socket's do so themselves), reset by
   * `abortConnections`; a socket whose connections are not links overrides that instead.
   */
  // biome-ignore lint/suspicious/noExplicitAny: each subclass links its own connection type.
  readonly live = new LiveConnections<any>();
  /** `context.allowedSources` as a check; undefined when every client is allowed. */
  readonly #allowed: ((address: string | undefined) => boolean) | undefined;
  /** The context's logger. */
  readonly log: Logger;
  /**
   * Writes the PROXY protocol header on an endpoint connection (TCP, when the Service's
   * `userspace-proxy.io/proxy-protocol` annotation asks for it); undefined otherwise, so a socket
   * adds nothing per connection by default.
   * @internal shared by core's own TCP socket; not part of the contract.
   */
  protected readonly proxyHeader: ProxyHeaderWriter | undefined;
  readonly #addr: Addr;
  readonly #protocol: Protocol;
  #info: ServiceInfo | undefined;
  #closed = false;
  #active = 0;
  #idleWaiters: (() => void)[] | undefined;
  readonly #loopDone: Promise<void>;
  #endLoop!: () => void;

  protected constructor(context: ProxySocketContext, bound: Addr, protocol: Protocol) {
    this.context = context;
    this.log = context.logger;
    this.#addr = bound;
    this.#protocol = protocol;
    this.#allowed = sourceRangeCheck(context.allowedSources);
    this.proxyHeader = proxyHeaderWriter(context, bound, this.log);
    this.#loopDone = new Promise((resolve) => {
      this.#endLoop = resolve;
    });
  }

  /** The bound address (a copy); with port 0 asked for, the port the OS chose. */
  addr(): Addr {
    return { ...this.#addr };
  }

  /** The port asked for (0 when the OS chose), which is what the Proxier releases. */
  listenPort(): number {
    return this.context.port;
  }

  /** The ServiceInfo being served, once `proxyLoop` was called. */
  protected get info(): ServiceInfo | undefined {
    return this.#info;
  }

  /** True once `close` was called. */
  protected get closed(): boolean {
    return this.#closed;
  }

  /**
   * Starts serving `info`. Resolves when the socket is closed (or closes itself on finding
   * `info.isAlive()` false); never rejects. A second call is logged and ignored.
   */
  proxyLoop(info: ServiceInfo): Promise<void> {
    if (this.#info !== undefined) {
      this.log.warn(`proxyLoop called twice on ${this.describe()}; ignoring the second call`);
      return this.#loopDone;
    }
    if (this.#closed) return this.#loopDone;
    this.#info = info;
    this.serve(info);
    return this.#loopDone;
  }

  /** Stops accepting (idempotent) and ends the loop; resolves once the listener is closed. */
  close(): Promise<void> {
    if (this.#closed) return this.closing();
    this.#closed = true;
    const done = this.shutdown();
    this.log.debug(`closed ${this.describe()}`);
    this.#endLoop();
    this.#checkIdle();
    return done;
  }

  /** Connections (sessions) accepted and not yet fully closed. */
  activeConnections(): number {
    return this.#active;
  }

  /** Resolves once the socket is closed and carries no connection. */
  idle(): Promise<void> {
    if (this.#closed && this.#active === 0) return Promise.resolve();
    return new Promise((resolve) => {
      this.#idleWaiters ??= [];
      this.#idleWaiters.push(resolve);
    });
  }

  /** ProxySocket: resets every connection in `live` (a drain's deadline passed). */
  abortConnections(): void {
    this.live.abortAll();
  }

  /**
   * True when this socket checks its clients' addresses (it has `allowedSources`): only then does
   * the TCP socket read a client's address at accept (a getpeername(2) per connection otherwise saved).
   */
  protected get filtersSources(): boolean {
    return this.#allowed !== undefined;
  }

  /**
   * Whether a client from `address` may use this socket (`context.allowedSources`, the Service's
   * loadBalancerSourceRanges on a load-balancer IP). A refusal is published on `refused` as
   * `source-range`; the caller closes or drops the client.
   */
  protected admitted(address: string | undefined): boolean {
    if (this.#allowed === undefined || this.#allowed(address)) return true;
    if (channels.refused.hasSubscribers) {
      const message: RefusedMessage = {
        service: servicePortNameString(this.context.servicePort),
        protocol: this.#protocol,
        reason: 'source-range',
      };
      channels.refused.publish(message);
    }
    return false;
  }

  /** "ip:port/PROTOCOL", for messages. */
  protected describe(): string {
    return `${joinHostPort(this.#addr.address, this.#addr.port)}/${this.#protocol}`;
  }

  /** A connection (session) started. */
  protected connectionOpened(): void {
    this.#active++;
  }

  /** A connection (session) ended. */
  protected connectionClosed(): void {
    this.#active--;
    if (this.#active === 0) this.#checkIdle();
  }

  /** Begins serving; called once, by `proxyLoop`. */
  protected abstract serve(info: ServiceInfo): void;

  /** Closes the listener; called once, by `close`. */
  protected abstract shutdown(): Promise<void>;

  /** What a repeated `close` returns (the first close's promise, or a resolved one). */
  protected abstract closing(): Promise<void>;

  #checkIdle(): void {
    if (!this.#closed || this.#active !== 0 || this.#idleWaiters === undefined) return;
    const waiters = this.#idleWaiters;
    this.#idleWaiters = undefined;
    for (const resolve of waiters) resolve();
  }
}
