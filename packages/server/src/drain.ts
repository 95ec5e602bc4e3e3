import diagnosticsChannel from 'node:diagnostics_channel';
import { CHANNELS } from '@userspace-proxy/core';

/**
 * Counts established proxied connections from core's diagnostics channels, so that shutdown can
 * wait for them: after the listeners close, the process lingers until the count reaches zero or the
 * drain timeout passes, whichever is first.
 */
export class ConnectionTracker {
  #active = 0;
  #waiters = new Set<() => void>();
  readonly #onOpen = () => {
    this.#active++;
  };
  readonly #onClose = () => {
    this.#active = Math.max(0, this.#active - 1);
    if (this.#active === 0) {
      for (const wake of this.#waiters) wake();
      this.#waiters.clear();
    }
  };

  /** Starts counting; returns the function that stops. */
  subscribe(): () => void {
    diagnosticsChannel.subscribe(CHANNELS.connectionOpen, this.#onOpen);
    diagnosticsChannel.subscribe(CHANNELS.connectionClose, this.#onClose);
    return () => {
      diagnosticsChannel.unsubscribe(CHANNELS.connectionOpen, this.#onOpen);
      diagnosticsChannel.unsubscribe(CHANNELS.connectionClose, this.#onClose);
    };
  }

  /** Connections open now. */
  get active(): number {
    return this.#active;
  }

  /**
   * Resolves true when no connection is left, or false when `timeoutMs` passes first or `signal`
   * aborts (a second Ctrl-C cuts the drain short).
   */
  waitForIdle(timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    if (this.#active === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const finish = (idle: boolean) => {
        clearTimeout(timer);
        this.#waiters.delete(wake);
        signal?.removeEventListener('abort', abort);
        resolve(idle);
      };
      const wake = () => finish(true);
      const abort = () => finish(false);
      const timer = setTimeout(() => finish(false), timeoutMs);
      this.#waiters.add(wake);
      signal?.addEventListener('abort', abort, { once: true });
      if (signal?.aborted) abort();
    });
  }
}
