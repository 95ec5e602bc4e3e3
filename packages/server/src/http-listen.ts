import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { componentLogger, type Logger } from '@userspace-proxy/core';

/**
 * Listening with kube-proxy's policy for its health and metrics servers: a failed bind (the port is
 * taken, the address is not local yet) is logged and retried every 5 s forever, because the proxy
 * itself matters more than its observability; with `--bind-address-hard-fail` the first failure is
 * fatal instead, for operators who would rather restart than run blind.
 */

/** kube-proxy's retry interval for both servers. */
export const LISTEN_RETRY_MS = 5000;

/** Options of {@link RetryingListener}. */
export interface RetryingListenerOptions {
  /** Names the server in logs and errors: "healthz" or "metrics". */
  name: string;
  host: string;
  port: number;
  /** Reject on the first failure instead of retrying. */
  hardFail: boolean;
  /** Default {@link LISTEN_RETRY_MS}. */
  retryDelayMs?: number;
  /** Called on each failure (the daemon records a Warning event); must not throw. */
  onFailure?: (err: Error) => void;
  logger?: Logger;
  setTimeout?: typeof setTimeout;
  clearTimeout?: typeof clearTimeout;
}

/** Keeps trying to make `server` listen until it does or is closed. */
export class RetryingListener {
  readonly #server: Server;
  readonly #options: RetryingListenerOptions;
  readonly #log: Logger;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  #listening = false;
  #settle: (() => void) | undefined;

  constructor(server: Server, options: RetryingListenerOptions) {
    this.#server = server;
    this.#options = options;
    this.#log = componentLogger(options.logger, `${options.name}-server`);
  }

  /**
   * Resolves once listening. Without hard fail it never rejects (it keeps retrying until `close`,
   * which resolves it); with hard fail it rejects with the first error.
   */
  start(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#settle = resolve;
      const attempt = () => {
        this.#timer = undefined;
        if (this.#closed) return resolve();
        const onError = (err: Error) => {
          this.#server.off('listening', onListening);
          const where = `${this.#options.host}:${this.#options.port}`;
          const error = new Error(
            `failed to start ${this.#options.name} server on ${where}: ${err.message}`,
            {
              cause: err,
            },
          );
          try {
            this.#options.onFailure?.(error);
          } catch {
            // a reporting hook must not stop the retry loop
          }
          if (this.#options.hardFail) return reject(error);
          const delay = this.#options.retryDelayMs ?? LISTEN_RETRY_MS;
          this.#log.error(`${error.message}; retrying in ${delay} ms`);
          this.#timer = (this.#options.setTimeout ?? setTimeout)(attempt, delay);
        };
        const onListening = () => {
          this.#server.off('error', onError);
          this.#listening = true;
          this.#log.info(
            `serving on ${this.#options.host}:${this.address()?.port ?? this.#options.port}`,
          );
          resolve();
        };
        this.#server.once('error', onError);
        this.#server.once('listening', onListening);
        this.#server.listen({
          host: this.#options.host,
          port: this.#options.port,
          exclusive: true,
        });
      };
      attempt();
    });
  }

  /** The bound address once listening. */
  address(): AddressInfo | undefined {
    const addr = this.#server.address();
    return typeof addr === 'object' && addr !== null ? addr : undefined;
  }

  /** Stops retrying and closes the server (and its idle keep-alive connections). */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) (this.#options.clearTimeout ?? clearTimeout)(this.#timer);
    this.#timer = undefined;
    this.#settle?.();
    if (!this.#listening) return;
    this.#listening = false;
    await new Promise<void>((resolve) => {
      this.#server.close(() => resolve());
      this.#server.closeAllConnections();
    });
  }
}
