import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { openSync, readdirSync, readFileSync } from 'node:fs';
import { parseProcStat, parseVmRss } from './parse.js';

/** What a bounded tool run returned. */
export interface RunOutput {
  code: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/**
 * Every process the peers benchmark starts, servers and tool runs alike. Each runs in a process
 * group of its own (`detached`), so stopping it stops its workers too (nginx's, HAProxy's none), and
 * a Ctrl-C in the terminal reaches only the benchmark, which then stops them all itself: nothing
 * outlives a run, whether it ends normally, throws, or is interrupted.
 */
export class Processes {
  readonly #live = new Set<ChildProcess>();

  /** Starts a long-running server; its output goes to `logFile` (read when it fails to start). */
  server(cmd: string, args: string[], logFile: string, cwd?: string): ChildProcess {
    const fd = openSync(logFile, 'a');
    const child = spawn(cmd, args, { detached: true, stdio: ['ignore', fd, fd], cwd });
    this.#track(child);
    return child;
  }

  /** Starts a helper that talks over stdin/stdout lines (the idle-connection helper). */
  piped(cmd: string, args: string[]): ChildProcess {
    const child = spawn(cmd, args, { detached: true, stdio: ['pipe', 'pipe', 'inherit'] });
    this.#track(child);
    return child;
  }

  /** Runs a tool to its end, killed after `timeoutMs`: no measurement can hang the run. */
  run(cmd: string, args: string[], timeoutMs: number): Promise<RunOutput> {
    const child = spawn(cmd, args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    this.#track(child);
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout?.setEncoding('utf8').on('data', (s: string) => {
      if (stdout.length < 4_000_000) stdout += s;
    });
    child.stderr?.setEncoding('utf8').on('data', (s: string) => {
      if (stderr.length < 100_000) stderr += s;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup(child, 'SIGKILL');
    }, timeoutMs);
    return new Promise((resolve) => {
      const done = (code: number | null) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr, timedOut });
      };
      child.once('error', (err) => {
        stderr += String(err);
        done(null);
      });
      child.once('close', done);
    });
  }

  /** SIGTERM, then SIGKILL after `graceMs` if the group is still there. */
  async stop(child: ChildProcess, graceMs = 1500): Promise<void> {
    if (exited(child)) return;
    const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    killGroup(child, 'SIGTERM');
    const timer = setTimeout(() => killGroup(child, 'SIGKILL'), graceMs);
    await gone;
    clearTimeout(timer);
  }

  /** Stops everything still running. */
  async stopAll(): Promise<void> {
    await Promise.all([...this.#live].map((c) => this.stop(c)));
  }

  /** The synchronous last resort for `process.on('exit')`: SIGKILL to every group still tracked. */
  killAllNow(): void {
    for (const c of this.#live) killGroup(c, 'SIGKILL');
  }

  /**
   * Tracked until the group leader exits; then whatever is left of its group (an orphaned nginx
   * worker) gets a SIGKILL and the group is forgotten, so a later kill can never reach a reused pid.
   */
  #track(child: ChildProcess): void {
    this.#live.add(child);
    child.once('exit', () => {
      killGroup(child, 'SIGKILL');
      this.#live.delete(child);
    });
  }
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/** Signals the child's whole process group (its pid is the group id, as it was spawned detached). */
function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

/**
 * Stops every tracked process on the way out: normal exit, an uncaught error, Ctrl-C (SIGINT),
 * SIGTERM or SIGHUP (then `cleanup` runs too: the run directory goes). Returns a function that
 * removes the handlers again.
 */
export function stopOnExit(procs: Processes, cleanup: () => void = () => {}): () => void {
  const onExit = () => procs.killAllNow();
  const onSignal = (signal: NodeJS.Signals) => {
    console.error(`\n${signal}: stopping every server the benchmark started`);
    procs.killAllNow();
    cleanup();
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.on('exit', onExit);
  for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(s, onSignal);
  return () => {
    process.off('exit', onExit);
    for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.off(s, onSignal);
  };
}

let clkTck = 0;
/** Clock ticks per second of /proc/PID/stat (`getconf CLK_TCK`, 100 on every Linux seen). */
export function clockTicks(): number {
  if (clkTck) return clkTck;
  try {
    clkTck = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    clkTck = 100;
  }
  return clkTck;
}

/** `root` and every live descendant (nginx's workers, anything a proxy forks), from /proc. */
export function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const st = parseProcStat(readFileSync(`/proc/${name}/stat`, 'utf8'));
      const list = children.get(st.ppid) ?? [];
      list.push(st.pid);
      children.set(st.ppid, list);
    } catch {
      // The process ended while we looked.
    }
  }
  const out: number[] = [];
  const todo = [root];
  while (todo.length) {
    const pid = todo.pop() as number;
    out.push(pid);
    todo.push(...(children.get(pid) ?? []));
  }
  return out;
}

/**
 * CPU seconds the process tree has used so far: every live member's own user+system time, plus the
 * time of children the root has already reaped. Sampled before and after a measurement.
 */
export function treeCpuSeconds(root: number): number {
  let ticks = 0;
  for (const pid of processTree(root)) {
    try {
      const st = parseProcStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
      ticks += st.ownTicks + (pid === root ? st.childTicks : 0);
    } catch {
      // Gone.
    }
  }
  return ticks / clockTicks();
}

/** Resident memory of the process tree in bytes (nginx: the master and both workers). */
export function treeRss(root: number): number {
  let bytes = 0;
  for (const pid of processTree(root)) {
    try {
      bytes += parseVmRss(readFileSync(`/proc/${pid}/status`, 'utf8'));
    } catch {
      // Gone.
    }
  }
  return bytes;
}
