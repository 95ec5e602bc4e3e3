import { type ChildProcess, fork } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { PeerMethods } from './peer-child.js';

const TSX = pathToFileURL(
  join(dirname(createRequire(import.meta.url).resolve('tsx/package.json')), 'dist/loader.mjs'),
).href;

/**
 * The parent's side of peer-child.ts: a forked process (through tsx) whose socket methods are
 * called over IPC, typed after the child's methods. Stopping it disconnects and, failing that,
 * kills it, so a probe never leaves one behind.
 */
export class PeerProcess {
  readonly #child: ChildProcess;
  readonly #pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  #next = 1;

  constructor() {
    this.#child = fork(fileURLToPath(new URL('./peer-child.ts', import.meta.url)), [], {
      execArgv: ['--import', TSX],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.#child.on(
      'message',
      (msg: { id: number; ok: boolean; value?: unknown; error?: string }) => {
        const w = this.#pending.get(msg.id);
        if (!w) return;
        this.#pending.delete(msg.id);
        if (msg.ok) w.resolve(msg.value);
        else w.reject(new Error(msg.error));
      },
    );
    this.#child.on('exit', (code) => {
      for (const w of this.#pending.values()) w.reject(new Error(`peer exited with ${code}`));
      this.#pending.clear();
    });
  }

  /** The child's pid (its descriptors and memory are its own). */
  get pid(): number {
    return this.#child.pid as number;
  }

  /** Calls `method` in the child. */
  call<K extends keyof PeerMethods>(
    method: K,
    ...args: Parameters<PeerMethods[K]>
  ): Promise<Awaited<ReturnType<PeerMethods[K]>>> {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.#child.send({ id, method, args });
    });
  }

  /** Ends the child (it exits when the channel closes; SIGKILL after 3 s). */
  stop(): void {
    if (this.#child.connected) this.#child.disconnect();
    const child = this.#child;
    setTimeout(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }, 3000).unref();
  }
}
