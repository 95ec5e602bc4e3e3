import { type ChildProcess, fork } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** Children run the TypeScript sources through tsx, whoever started the orchestrator (tsx or vitest). */
const tsxLoader = pathToFileURL(
  join(dirname(createRequire(import.meta.url).resolve('tsx/package.json')), 'dist/loader.mjs'),
).href;
const CHILD_EXEC_ARGV = ['--import', tsxLoader, '--expose-gc'];
/** Workspace packages resolve to their TypeScript sources, unless `--built` asked for dist/. */
const SOURCES = '--conditions=@userspace-proxy/source';

/** One request to a child process; `method` names a function of the child's role. */
interface Request {
  id: number;
  method: string;
  args: unknown[];
}

/** The reply to a {@link Request}. */
interface Reply {
  id: number;
  ok: boolean;
  value?: unknown;
  error?: string;
}

/** The functions a role exposes to the orchestrator. */
export type RoleMethods = Record<string, (...args: never[]) => unknown>;

/**
 * A role running in its own process, so that its CPU time and memory are its own and the load
 * generator, the proxy and the backends do not share an event loop.
 */
export class RoleProcess {
  readonly #child: ChildProcess;
  readonly #pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  #next = 1;

  /**
   * `opts.profiled` marks a process that runs a proxy under a role shared with its peers (the
   * `sctp` role serves the sink, the proxy and the load): only that one is profiled.
   * `opts.nodeArgs` are more Node/V8 flags for this child (`--max-semi-space-size=1`…), so one
   * role's memory settings can be measured without touching the others'.
   */
  constructor(role: string, opts: { profiled?: boolean; nodeArgs?: readonly string[] } = {}) {
    const entry = fileURLToPath(new URL('./child.ts', import.meta.url));
    // `--profile DIR` (main.ts): every proxy host writes a V8 CPU profile there when it ends.
    const profileDir = process.env.BENCH_PROFILE_DIR;
    const profiled = opts.profiled ?? (role === 'proxy' || role === 'idler-proxy');
    const profile = profiled && profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
    // `BENCH_TRACE_GC=1` with `--profile`: the profiled processes also log every GC (--trace-gc).
    if (profile.length > 0 && process.env.BENCH_TRACE_GC) profile.push('--trace-gc');
    this.#child = fork(entry, [role], {
      execArgv: [
        ...CHILD_EXEC_ARGV,
        ...(process.env.BENCH_BUILT ? [] : [SOURCES]),
        ...profile,
        // Node and V8 flags for this role only (the idler bench's `--node-arg`).
        ...(opts.nodeArgs ?? []),
      ],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.#child.on('message', (msg: Reply) => {
      const waiter = this.#pending.get(msg.id);
      if (!waiter) return;
      this.#pending.delete(msg.id);
      if (msg.ok) waiter.resolve(msg.value);
      else waiter.reject(new Error(msg.error));
    });
    this.#child.on('exit', (code) => {
      for (const w of this.#pending.values()) w.reject(new Error(`${role} exited with ${code}`));
      this.#pending.clear();
    });
  }

  /** Calls `method` in the child and resolves with its result. */
  call<T>(method: string, ...args: unknown[]): Promise<T> {
    const id = this.#next++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.#child.send({ id, method, args } satisfies Request);
    });
  }

  /**
   * Ends the child: it exits by itself once the IPC channel closes (so a CPU profile gets written),
   * and is killed if it has not after 5 s.
   */
  stop(): void {
    if (this.#child.connected) this.#child.disconnect();
    const child = this.#child;
    setTimeout(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }, 5000).unref();
  }
}

/** Serves a role's methods over the IPC channel; called by child.ts. */
export function serveRole(methods: RoleMethods): void {
  process.on('message', async (msg: Request) => {
    const fn = methods[msg.method] as ((...args: unknown[]) => unknown) | undefined;
    try {
      if (!fn) throw new Error(`unknown method ${msg.method}`);
      const value = await fn(...msg.args);
      process.send?.({ id: msg.id, ok: true, value } satisfies Reply);
    } catch (err) {
      const error = err instanceof Error ? (err.stack ?? err.message) : String(err);
      process.send?.({ id: msg.id, ok: false, error } satisfies Reply);
    }
  });
  process.on('disconnect', () => process.exit(0));
}

/** What {@link processStats} reports. */
export interface ProcessStats {
  /** User + system CPU time since the process started. */
  cpuSeconds: number;
  rss: number;
  heapUsed: number;
  /** What V8 has committed for its heap (used or not). */
  heapTotal: number;
  /** Memory of Buffers and other objects outside the JS heap that V8 is told about. */
  external: number;
}

/** CPU seconds (user + system) and memory of this process, for the orchestrator. */
export function processStats(): ProcessStats {
  const cpu = process.cpuUsage();
  const mem = process.memoryUsage();
  return {
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    rss: mem.rss,
    heapUsed: mem.heapUsed,
    heapTotal: mem.heapTotal,
    external: mem.external,
  };
}
