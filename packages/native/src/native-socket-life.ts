/**
 * What the native sockets (TCP and UDP) share of a socket's life: listening on a Service's address
 * (`ctx.ip`, or every address of both families, '::', when it is null; a host without IPv6 falls
 * back to every IPv4 address, as core's sockets do), and the promises of proxyLoop and idle().
 */
import type { ProxySocketContext } from '@userspace-proxy/core';

/**
 * Listens through `listen` on `ctx.ip` or '::'; when that fails for want of IPv6 (EAFNOSUPPORT,
 * EADDRNOTAVAIL) with no `ctx.ip`, on '0.0.0.0'. Resolves with the address used and what
 * `listen` returned; any other failure is thrown.
 */
export async function listenAnyFamily<R>(
  ctx: ProxySocketContext,
  listen: (address: string) => Promise<R>,
): Promise<{ address: string; r: R }> {
  const address = ctx.ip ?? '::';
  try {
    return { address, r: await listen(address) };
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (ctx.ip !== null || (code !== 'EAFNOSUPPORT' && code !== 'EADDRNOTAVAIL')) throw error;
    // No IPv6 on this host: every IPv4 address.
    return { address: '0.0.0.0', r: await listen('0.0.0.0') };
  }
}

/**
 * The promise proxyLoop returns (settled by `endLoop` when the socket closes) and those of idle()
 * (settled once the socket is closed and carries nothing: `drained`, as its owner computes it).
 */
export class SocketDrain {
  /** What proxyLoop returns. */
  readonly loopDone: Promise<void>;
  #endLoop!: () => void;
  #waiters: (() => void)[] = [];

  constructor() {
    this.loopDone = new Promise<void>((resolve) => {
      this.#endLoop = resolve;
    });
  }

  /** The socket closed: proxyLoop's promise settles. */
  endLoop(): void {
    this.#endLoop();
  }

  /** idle(): at once when `drained`, else at the {@link check} that finds it drained. */
  idle(drained: boolean): Promise<void> {
    if (drained) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  /** Settles the waiting idle() promises when `drained` (closed and carrying nothing). */
  check(drained: boolean): void {
    if (!drained || this.#waiters.length === 0) return;
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const resolve of waiters) resolve();
  }
}
