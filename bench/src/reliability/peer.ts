import { RoleProcess } from '../rpc.js';
import type { PeerMethods } from './peer-child.js';

/**
 * The parent's side of peer-child.ts: a benchmark role process (`reliability-peer`) whose socket
 * methods are called over IPC, typed after the child's methods. Stopping it disconnects and,
 * failing that, kills it, so a probe never leaves one behind.
 */
export class PeerProcess {
  readonly #role = new RoleProcess('reliability-peer');

  /** Calls `method` in the child. */
  call<K extends keyof PeerMethods>(
    method: K,
    ...args: Parameters<PeerMethods[K]>
  ): Promise<Awaited<ReturnType<PeerMethods[K]>>> {
    return this.#role.call(method, ...args);
  }

  /** Ends the child (it exits when the channel closes; SIGKILL after 5 s). */
  stop(): void {
    this.#role.stop();
  }
}
