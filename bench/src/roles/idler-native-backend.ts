import { type ChildProcess, execFile, spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/**
 * The idler benchmark's backend in C (bench/native/idler-backend.c), with the same three calls as
 * the Node role `idler-backend` (bench/src/roles/idler-roles.ts), so idler-bench.ts takes either.
 * On a cluster the backend pods do not run on the proxy's cores; on this 2-core machine a Node
 * backend spent about 800 ms of them accepting 10 000 connections during the hand-over it measures,
 * as much as the proxy's own CPU. The C program costs a fraction of that (docs/benchmarks.md,
 * "Session 9").
 */

/** What the backend answers to `waitAll`: the same shape for both backends. */
export interface IdlerArrivals {
  firstBytes: number;
  /** When the last first byte arrived, ms on the CLOCK_MONOTONIC basis of `process.hrtime`. */
  lastAt: number;
  /** The backend's CPU time from `waitAll` to the answer, ms. */
  cpuMs: number;
}

/** The calls idler-bench.ts makes of a backend, native or Node. */
export interface IdlerBackend {
  start(count: number, listeners: number): Promise<{ ip: string; ports: number[] }>;
  waitAll(timeoutMs: number): Promise<IdlerArrivals>;
  stop(): void;
}

/** The bench's own build cache, beside the source (ignored by git). */
const SOURCE = fileURLToPath(new URL('../../native/idler-backend.c', import.meta.url));
const OUT_DIR = fileURLToPath(new URL('../../native/build/', import.meta.url));
const FLAGS = ['-O2', '-Wall'];

/** Whether `cc` runs here; without it the bench falls back to the Node backend. */
export function hasCC(): boolean {
  return spawnSync('cc', ['--version'], { stdio: 'ignore' }).status === 0;
}

let built: Promise<string> | undefined;

/**
 * Compiles the backend once per source version (the file name carries a hash of the source and
 * flags) and resolves with the binary's path. The build goes to a temporary name renamed into
 * place, so two bench processes building at once never run half a binary.
 */
export function buildIdlerBackend(): Promise<string> {
  if (built !== undefined) return built;
  const hash = createHash('sha256')
    .update(readFileSync(SOURCE))
    .update(FLAGS.join('\0'))
    .digest('hex')
    .slice(0, 12);
  const out = join(OUT_DIR, `idler-backend-${hash}`);
  built = new Promise<string>((resolve, reject) => {
    if (existsSync(out)) {
      resolve(out);
      return;
    }
    mkdirSync(OUT_DIR, { recursive: true });
    const tmp = `${out}.${randomBytes(4).toString('hex')}.tmp`;
    execFile('cc', [...FLAGS, '-o', tmp, SOURCE], { timeout: 60_000 }, (err, _o, stderr) => {
      if (err) {
        rmSync(tmp, { force: true });
        reject(new Error(`building ${SOURCE} failed: ${String(stderr).slice(0, 500)}`));
        return;
      }
      renameSync(tmp, out);
      resolve(out);
    });
  });
  built.catch(() => {
    built = undefined;
  });
  return built;
}

const octet = () => 1 + Math.floor(Math.random() * 250);

/**
 * The C backend as a child process, driven over its stdin and stdout (one line per answer, see
 * the C file's header). Its `lastAt` is CLOCK_MONOTONIC, which `process.hrtime` reads too (checked:
 * a C reading taken between two `process.hrtime.bigint()` calls lies between them), so it compares
 * with the proxy's event time across processes exactly.
 */
export class NativeIdlerBackend implements IdlerBackend {
  #child: ChildProcess | undefined;
  readonly #lines: string[] = [];
  #waiter: ((line: string) => void) | undefined;
  #exited: Error | undefined;

  async start(count: number, listeners: number): Promise<{ ip: string; ports: number[] }> {
    const binary = await buildIdlerBackend();
    const ip = `127.203.${octet()}.${octet()}`;
    const child = spawn(binary, [ip, String(listeners), String(count)], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    this.#child = child;
    child.on('exit', (code, signal) => {
      this.#exited = new Error(`the native idler backend exited (${code ?? signal})`);
      this.#deliver(`exit`);
    });
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) =>
      this.#deliver(line),
    );
    const first = await this.#next();
    if (!first.startsWith('ports ')) throw this.#exited ?? new Error(`unexpected: ${first}`);
    return { ip, ports: first.slice(6).split(' ').map(Number) };
  }

  /** Resolves when every expected first byte has arrived, or with what had by `timeoutMs`. */
  async waitAll(timeoutMs: number): Promise<IdlerArrivals> {
    this.#child?.stdin?.write('w\n');
    const timer = setTimeout(() => this.#child?.stdin?.write('r\n'), timeoutMs);
    try {
      const line = await this.#next();
      const m = /^done (\d+) (\d+) (\d+)$/.exec(line);
      if (m === null) throw this.#exited ?? new Error(`unexpected: ${line}`);
      return {
        firstBytes: Number(m[1]),
        lastAt: Number(BigInt(m[2] ?? '0')) / 1e6,
        cpuMs: Number(m[3]) / 1000,
      };
    } finally {
      clearTimeout(timer);
    }
  }

  stop(): void {
    // The program exits when its stdin closes.
    this.#child?.stdin?.end();
  }

  #deliver(line: string): void {
    const waiter = this.#waiter;
    this.#waiter = undefined;
    if (waiter) waiter(line);
    else this.#lines.push(line);
  }

  #next(): Promise<string> {
    const line = this.#lines.shift();
    if (line !== undefined) return Promise.resolve(line);
    if (this.#exited) return Promise.reject(this.#exited);
    return new Promise((resolve) => {
      this.#waiter = resolve;
    });
  }
}
