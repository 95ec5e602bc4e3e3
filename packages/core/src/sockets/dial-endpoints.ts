import net from 'node:net';
import { channels, type DialErrorMessage } from '../diagnostics.js';
import { EndpointDialError } from '../errors.js';
import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import { componentLogger, type Logger } from '../logger.js';
import type { Addr } from '../model/model.js';
import {
  type ServicePortName,
  servicePortNameString,
  splitHostPort,
} from '../model/service-port-name.js';
import { DeadlineBucket, type DeadlineWaiter } from './dial-deadlines.js';
import { DEFAULT_PROXY_SOCKET_OPTIONS } from './proxy-socket-options.js';
import { isNoEndpointsError } from './refusal.js';

/**
 * Opens the TCP connection of one dial attempt. The default is `net.connect({ host, port })`; the
 * TCP proxy socket passes one that adds its socket options (keep-alive, no-delay, read buffers), and
 * tests pass one that never connects to simulate a blackholed endpoint on loopback, where a real
 * unreachable address would be refused at once instead of timing out.
 */
export type ConnectFn = (endpoint: { host: string; port: number }) => net.Socket;

/** Options of {@link tryConnectEndpoints}. */
export interface TryConnectOptions {
  /** One attempt per entry, each with that timeout. Default [250, 500, 1000, 2000] (the reference's). */
  timeoutsMs?: readonly number[];
  logger?: Logger;
  /** Aborts the dial: the attempt in progress is destroyed and the promise rejects with the reason. */
  signal?: AbortSignal;
  /** Default: `net.connect`. */
  connect?: ConnectFn;
  /**
   * The first attempt was made by the caller, to an endpoint it took from `lb.nextEndpoint` ahead
   * of time (the native data path dials a pick made before the client arrived), and failed with
   * `error`. The dial starts by handling that failure as its own (logged, published on
   * `dialError`, reported to the balancer, or ending at once on a local resource error), then goes
   * on at attempt 2 with `sessionAffinityReset`, with the second timeout.
   */
  failedFirst?: { readonly endpoint: string; readonly error: unknown };
}

/** Internal options of {@link dialEndpoints}: a caller that already has the name passes it. */
export interface DialOptions extends TryConnectOptions {
  /** `servicePortNameString(service)`, for messages; computed on demand when absent. */
  name?: string;
}

/** Called once with the connected socket and its endpoint string, or with the error. */
export type DialCallback = (error: unknown, socket?: net.Socket, endpoint?: string) => void;

/**
 * A dial's caller as one object instead of closures: the TCP proxy socket's connection object is
 * its own dialler, so a connection allocates no callback or connect function of its own.
 */
export interface DialClient {
  /** Opens one attempt; the options' `connect` when absent. */
  connect?(endpoint: { host: string; port: number }): net.Socket;
  /** Called once, as a {@link DialCallback}. */
  dialed(error: unknown, socket?: net.Socket, endpoint?: string): void;
}

/**
 * Errors that say this host is out of a resource, not that the endpoint is bad: retrying at once on
 * another endpoint would fail the same way and reset the client's affinity for nothing.
 */
const LOCAL_RESOURCE_ERRORS = new Set(['EMFILE', 'ENFILE', 'ENOBUFS', 'ENOMEM']);

/** True for an error caused by this host running out of descriptors or memory. */
export function isLocalResourceError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && LOCAL_RESOURCE_ERRORS.has(code);
}

/** The error an attempt that did not connect in time fails with (a cause, published on dialError). */
export class DialTimeoutError extends Error {
  readonly code = 'ETIMEDOUT';
  constructor(endpoint: string, timeoutMs: number) {
    super(`connect to ${endpoint} timed out after ${timeoutMs} ms`);
    this.name = 'DialTimeoutError';
  }
}

/**
 * Connects to an endpoint of `service`, trying up to one endpoint per timeout in
 * `opts.timeoutsMs` (at most 3.75 s by default). The first attempt honours ClientIP affinity; after
 * a failure the next pick passes `sessionAffinityReset`, so a sticky client is moved off a dead
 * endpoint (kubernetes#24648).
 *
 * Rejects at once, without retrying, with MissingServiceEntryError / MissingEndpointsError when the
 * load balancer has nothing to offer; with EndpointDialError (cause: the last failure) when every
 * attempt failed or when this host is out of descriptors (EMFILE, ENFILE: the reference panicked,
 * we let the caller refuse the one client and go on). Each failed attempt is logged at debug and
 * published on the `dialError` channel.
 *
 * The resolved socket is connected and has no 'error' listener left: attach one in the same
 * continuation (before awaiting anything else).
 */
export function tryConnectEndpoints(
  service: ServicePortName,
  srcAddr: Addr | null,
  protocol: 'TCP',
  lb: LoadBalancer,
  opts: TryConnectOptions = {},
): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    dialEndpoints(service, srcAddr, protocol, lb, opts, (error, socket) => {
      if (socket === undefined) reject(error);
      else resolve(socket);
    });
  });
}

/**
 * {@link tryConnectEndpoints} in callback form: what the TCP proxy socket uses, because a promise
 * and an async frame per connection are measurable at tens of thousands of connections a second.
 */
export function dialEndpoints(
  service: ServicePortName,
  srcAddr: Addr | null,
  protocol: 'TCP',
  lb: LoadBalancer,
  opts: DialOptions,
  done: DialCallback | DialClient,
): void {
  new EndpointDialer(service, srcAddr, protocol, lb, opts, done).start();
}

/** The dialer of an attempt, on its socket, so that the attempt's listeners are shared functions. */
const kDialer = Symbol('userspace-proxy:dialer');
type AttemptSocket = net.Socket & { [kDialer]?: EndpointDialer | undefined };

function onAttemptConnect(this: AttemptSocket): void {
  this[kDialer]?.connected();
}
function onAttemptError(this: AttemptSocket, error: Error): void {
  this[kDialer]?.errored(error);
}

/**
 * One client's dial: at most one attempt in flight. No closure of its own: the attempt's listeners
 * are shared (they find the dialer on the socket), its timeout is a shared {@link DeadlineBucket},
 * and the abort listener is made only for a dial with a signal.
 */
class EndpointDialer implements DeadlineWaiter {
  readonly #service: ServicePortName;
  readonly #srcAddr: Addr | null;
  readonly #protocol: 'TCP';
  readonly #lb: LoadBalancer;
  readonly #opts: DialOptions;
  readonly #timeouts: readonly number[];
  readonly #done: DialCallback | DialClient;
  #attempts = 0;
  #reset = false;
  #socket: net.Socket | undefined;
  #endpoint = '';
  #deadline: DeadlineBucket | undefined;
  #onAbort: (() => void) | undefined;
  #lastError: unknown;
  #finished = false;

  constructor(
    service: ServicePortName,
    srcAddr: Addr | null,
    protocol: 'TCP',
    lb: LoadBalancer,
    opts: DialOptions,
    done: DialCallback | DialClient,
  ) {
    this.#service = service;
    this.#srcAddr = srcAddr;
    this.#protocol = protocol;
    this.#lb = lb;
    this.#opts = opts;
    this.#timeouts = opts.timeoutsMs ?? DEFAULT_PROXY_SOCKET_OPTIONS.dialTimeoutsMs;
    this.#done = done;
  }

  start(): void {
    const { signal } = this.#opts;
    if (signal !== undefined) {
      if (signal.aborted) {
        this.#finish(signal.reason);
        return;
      }
      this.#onAbort = () => this.#aborted();
      signal.addEventListener('abort', this.#onAbort, { once: true });
    }
    const first = this.#opts.failedFirst;
    if (first === undefined) {
      this.#next();
      return;
    }
    this.#attempts = 1;
    this.#endpoint = first.endpoint;
    this.#failed(first.error);
  }

  #name(): string {
    return this.#opts.name ?? servicePortNameString(this.#service);
  }

  #next(): void {
    if (this.#attempts >= this.#timeouts.length) {
      this.#finish(new EndpointDialError(this.#name(), this.#attempts, { cause: this.#lastError }));
      return;
    }
    let endpoint: string;
    try {
      endpoint = this.#lb.nextEndpoint(this.#service, this.#srcAddr, this.#reset);
    } catch (error) {
      componentLogger(this.#opts.logger, 'dial').debug(
        `couldn't find an endpoint for ${this.#name()}: ${String(error)}`,
      );
      this.#finish(
        isNoEndpointsError(error)
          ? error
          : new EndpointDialError(this.#name(), this.#attempts, { cause: error }),
      );
      return;
    }
    const timeoutMs = this.#timeouts[this.#attempts] as number;
    this.#attempts++;
    this.#endpoint = endpoint;
    const target = dialTarget(endpoint);
    if (target === null) {
      this.#failed(new Error(`invalid endpoint "${endpoint}"`));
      return;
    }
    let socket: net.Socket;
    try {
      const client = this.#done;
      socket =
        typeof client === 'object' && client.connect !== undefined
          ? client.connect(target)
          : (this.#opts.connect ?? net.connect)(target);
    } catch (error) {
      this.#failed(error);
      return;
    }
    this.#socket = socket;
    (socket as AttemptSocket)[kDialer] = this;
    // `on`, not `once`: #drop removes both on the first of them, and `once` wraps each in a closure.
    socket.on('connect', onAttemptConnect);
    socket.on('error', onAttemptError);
    this.#deadline = DeadlineBucket.add(this, timeoutMs);
  }

  /** Stops watching the attempt in flight; with `error`, also destroys it. */
  #drop(error: boolean): net.Socket | undefined {
    this.#deadline?.remove(this);
    this.#deadline = undefined;
    const socket = this.#socket;
    this.#socket = undefined;
    if (socket !== undefined) {
      // Cleared rather than deleted: a deleted property can turn the socket into a slow dictionary.
      (socket as AttemptSocket)[kDialer] = undefined;
      socket.removeListener('connect', onAttemptConnect);
      socket.removeListener('error', onAttemptError);
      if (error) {
        // destroy() may still report the error being handled: keep it from becoming uncaught.
        socket.on('error', ignore);
        abortAttempt(socket);
      }
    }
    return socket;
  }

  /** The attempt's 'connect' (a shared listener; not for callers). */
  connected(): void {
    const socket = this.#drop(false);
    this.#report(true);
    this.#finish(undefined, socket);
  }

  /** The attempt's 'error' (a shared listener; not for callers). */
  errored(error: Error): void {
    this.#drop(true);
    this.#failed(error);
  }

  /** DeadlineWaiter: the attempt did not connect in time. */
  deadlinePassed(): void {
    this.#deadline = undefined;
    this.#drop(true);
    this.#failed(new DialTimeoutError(this.#endpoint, this.#timeouts[this.#attempts - 1] ?? 0));
  }

  #aborted(): void {
    this.#drop(true);
    this.#finish(this.#opts.signal?.reason);
  }

  #failed(error: unknown): void {
    if (this.#finished) return;
    this.#lastError = error;
    const endpoint = this.#endpoint;
    componentLogger(this.#opts.logger, 'dial').debug(
      `dial ${endpoint} for ${this.#name()} failed: ${String(error)}`,
    );
    if (channels.dialError.hasSubscribers) {
      const message: DialErrorMessage = {
        service: this.#name(),
        protocol: this.#protocol,
        endpoint,
        error: error instanceof Error ? error : new Error(String(error)),
      };
      channels.dialError.publish(message);
    }
    if (isLocalResourceError(error)) {
      this.#finish(new EndpointDialError(this.#name(), this.#attempts, { cause: error }));
      return;
    }
    this.#report(false);
    this.#reset = true;
    this.#next();
  }

  /** Tells the load balancer how the attempt went; a throwing balancer must not break the dial. */
  #report(ok: boolean): void {
    const lb = this.#lb;
    if (lb.reportDialResult === undefined) return;
    try {
      lb.reportDialResult(this.#service, this.#endpoint, ok);
    } catch (error) {
      componentLogger(this.#opts.logger, 'dial').debug('reportDialResult failed', error);
    }
  }

  #finish(error: unknown, socket?: net.Socket): void {
    if (this.#finished) return;
    this.#finished = true;
    if (this.#onAbort !== undefined) this.#opts.signal?.removeEventListener('abort', this.#onAbort);
    const endpoint = socket === undefined ? undefined : this.#endpoint;
    const done = this.#done;
    if (typeof done === 'function') done(error, socket, endpoint);
    else done.dialed(error, socket, endpoint);
  }
}

function ignore(): void {}

/**
 * Ends an attempt given up on (timed out, failed, aborted) with an RST rather than a FIN. On a busy
 * event loop the timeout can run before the 'connect' of an attempt whose handshake the kernel has
 * already completed (timers run before I/O in each turn of the loop), and the endpoint has accepted
 * it. A FIN would tell the endpoint that a client half-closed, and one that waits for the client to
 * finish (a server that never closes first) keeps its socket in CLOSE_WAIT for good, with the
 * proxy's side orphaned in FIN_WAIT2: what the soak suite's half-close probe found once in 9 500
 * connections. An RST tells it the connection is gone. `resetAndDestroy()` cannot do this: it
 * waits for the 'connect' of a connecting socket. Node's `_destroy` resets the handle when
 * `resetAndClosing` is set, and a connecting or connected TCP handle can be reset (SO_LINGER 0).
 */
function abortAttempt(socket: net.Socket): void {
  const handle = (socket as unknown as { _handle?: { reset?: unknown } | null })._handle;
  if (handle != null && typeof handle.reset === 'function' && !socket.destroyed) {
    (socket as unknown as { resetAndClosing: boolean }).resetAndClosing = true;
  }
  socket.destroy();
}

/** Endpoints parsed once: a Service's few endpoints are dialled over and over. */
const targets = new Map<string, Readonly<{ host: string; port: number }> | null>();
/** Entries kept in {@link targets}; past that it starts afresh (endpoints churn in a long run). */
const TARGET_CACHE_LIMIT = 4096;

/**
 * The host and port of an endpoint "ip:port", or null when it is not a valid IP endpoint. Cached:
 * splitting, `net.isIP` and the object were a measurable part of each connection's dial.
 */
function dialTarget(endpoint: string): Readonly<{ host: string; port: number }> | null {
  let target = targets.get(endpoint);
  if (target !== undefined) return target;
  const split = splitHostPort(endpoint);
  target =
    split === undefined || net.isIP(split.host) === 0 || split.port === 0
      ? null
      : { host: split.host, port: split.port };
  if (targets.size >= TARGET_CACHE_LIMIT) targets.clear();
  targets.set(endpoint, target);
  return target;
}
