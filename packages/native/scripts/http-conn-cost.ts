/**
 * New connections through the TCP helper against an nginx HTTP backend, as issue 14's wrk measure
 * runs them (`Connection: close`, a new connection per request), with what each connection costs:
 * the helper's CPU and Node's (`/proc/<pid>/stat`, `process.cpuUsage`), which move far less with
 * the machine's load than the rate does. Several helper binaries (`--helper PATH`, repeatable: a
 * build of another tree's tcp-relay-helper.c) run interleaved, rep after rep, beside direct, so a
 * before/after of a change to the C code is paired in one run with the same Node code.
 *
 *   npx tsx packages/native/scripts/http-conn-cost.ts [--helper PATH]... [--reps N] [--seconds S]
 *     [--conns 1,32] [--strace]
 *
 * --strace: also count the helper's system calls per connection (`strace -c -f`, its own wrk run
 * after the timed ones; strace slows the helper, so that run's rate means nothing).
 * Needs nginx and wrk on PATH.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { nginxHttpBackendConfig, PORTS, randomLayout } from '../../../bench/src/peers/configs.js';
import { openOneService } from './one-service.js';

const argv = process.argv.slice(2);
const many = (flag: string): string[] =>
  argv.flatMap((a, i) => (a === flag && argv[i + 1] !== undefined ? [argv[i + 1] as string] : []));
const one = (flag: string, def: string): string => many(flag)[0] ?? def;
const HELPERS = many('--helper');
const REPS = Number(one('--reps', '3'));
const SECONDS = Number(one('--seconds', '3'));
const CONNS = one('--conns', '1,32').split(',').map(Number);
const STRACE = argv.includes('--strace');
const BACKEND_HOST = '127.0.0.1';
const BACKEND_PORT = PORTS.http;

const execFileAsync = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

/** CPU seconds of a process and all its threads so far. */
function cpuOf(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / ticks;
}

/** nginx as the peers bench runs it for wrk (one definition of that backend: bench/src/peers/configs.ts). */
function startNginx(dir: string): ChildProcess {
  const conf = join(dir, 'nginx.conf');
  writeFileSync(conf, nginxHttpBackendConfig({ ...randomLayout(), backend: BACKEND_HOST }, dir));
  return spawn('nginx', ['-c', conf, '-p', dir], { stdio: 'ignore' });
}

/** Runs wrk without blocking this process: Node must keep serving the helper meanwhile. */
async function wrk(port: number, c: number, seconds: number): Promise<number> {
  const out = await execFileAsync(
    'wrk',
    [
      `-t${Math.min(2, c)}`,
      `-c${c}`,
      `-d${seconds}s`,
      '--timeout',
      '2s',
      '-H',
      'Connection: close',
      `http://127.0.0.1:${port}/`,
    ],
    { encoding: 'utf8' },
  );
  const m = /(\d+) requests in/.exec(out.stdout);
  return Number(m?.[1] ?? 0);
}

async function straceCount(pid: number, port: number, c: number): Promise<string> {
  const out = join(tmpdir(), `http-conn-strace-${process.pid}.txt`);
  const tids = readdirSync(`/proc/${pid}/task`);
  const st = spawn('strace', ['-c', '-o', out, ...tids.flatMap((t) => ['-p', t])], {
    stdio: 'ignore',
  });
  for (let i = 0; i < 200; i++) {
    const traced = tids.every((t) =>
      /TracerPid:\s+[1-9]/.test(readFileSync(`/proc/${pid}/task/${t}/status`, 'utf8')),
    );
    if (traced) break;
    await sleep(25);
  }
  const n = await wrk(port, c, SECONDS);
  await sleep(1200);
  const done = new Promise((r) => st.once('exit', r));
  st.kill('SIGINT');
  await done;
  const text = readFileSync(out, 'utf8');
  rmSync(out, { force: true });
  const rows: string[] = [];
  let total = 0;
  for (const line of text.split('\n')) {
    const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$/.exec(line);
    if (m?.[1] === undefined || m[2] === undefined || m[2] === 'total') continue;
    total += Number(m[1]);
    rows.push(`${m[2]} ${(Number(m[1]) / n).toFixed(2)}`);
  }
  return `${(total / n).toFixed(2)} calls/conn over ${n} (${rows.join(', ')})`;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'http-conn-cost-'));
  const nginx = startNginx(dir);
  await sleep(500);
  const subjects = HELPERS.length > 0 ? HELPERS : [''];
  const services = [];
  for (const helperPath of subjects) {
    const s = await openOneService(BACKEND_PORT, 'None', helperPath ? { helperPath } : {});
    services.push({ name: helperPath || 'built', s });
    await wrk(s.socket.addr().port, 32, 1); // warm-up: rings grown
  }
  console.log(
    `load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}, ${new Date().toISOString()}`,
  );
  for (let rep = 0; rep < REPS; rep++) {
    for (const c of CONNS) {
      const direct = await wrk(BACKEND_PORT, c, SECONDS);
      console.log(`rep ${rep + 1} c=${c} direct ${(direct / SECONDS).toFixed(0)}/s`);
      for (const { name, s } of services) {
        const pid = s.f.helperPid() as number;
        const h0 = cpuOf(pid);
        const n0 = process.cpuUsage();
        const n = await wrk(s.socket.addr().port, c, SECONDS);
        const h = cpuOf(pid) - h0;
        const nu = process.cpuUsage(n0);
        const node = (nu.user + nu.system) / 1e6;
        console.log(
          `rep ${rep + 1} c=${c} ${name}: ${(n / SECONDS).toFixed(0)}/s (${((n / direct) * 1).toFixed(2)} of direct), helper ${((h / n) * 1e6).toFixed(1)} µs/conn, node ${((node / n) * 1e6).toFixed(1)} µs/conn`,
        );
      }
    }
  }
  if (STRACE) {
    for (const c of CONNS) {
      for (const { name, s } of services) {
        const line = await straceCount(s.f.helperPid() as number, s.socket.addr().port, c);
        console.log(`strace c=${c} ${name}: ${line}`);
      }
    }
  }
  console.log(
    `load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}, ${new Date().toISOString()}`,
  );
  for (const { s } of services) await s.close();
  nginx.kill('SIGTERM');
  await sleep(300);
  rmSync(dir, { recursive: true, force: true });
}

await main();
