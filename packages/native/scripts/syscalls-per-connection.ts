/**
 * System calls of the TCP helper per short connection: a socket of `withNativeTcp` in this process,
 * an echo backend and a client making N connect / send "hi" / FIN / read-to-end cycles one at a
 * time through it, while `strace -c` counts every call of every helper thread (attached after a
 * warm-up, so start-up and the compile are not counted). Load-independent, unlike speed figures.
 *
 *   npx tsx packages/native/scripts/syscalls-per-connection.ts [--connections N] [--threads T]
 *     [--per-accept]
 *
 * --per-accept: a ClientIP Service, so every accept makes the round trip through Node (no picks
 * made ahead). Prints the calls per connection, by call, then the total.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openOneService } from './one-service.js';

const arg = (flag: string, def: number): number => {
  const i = process.argv.indexOf(flag);
  return i < 0 ? def : Number(process.argv[i + 1]);
};
const N = arg('--connections', 2000);
const THREADS = arg('--threads', 1);
const AFFINITY = process.argv.includes('--per-accept') ? 'ClientIP' : 'None';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function once(port: number, host: string): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const c = net.connect({ port, host });
    let got = 0;
    c.on('connect', () => c.end('hi'));
    c.on('data', (d) => {
      got += d.length;
    });
    c.on('error', reject);
    c.on('close', () => (got === 2 ? resolve() : reject(new Error(`echo of ${got} bytes`))));
  });
}

async function main(): Promise<void> {
  const backend = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    s.pipe(s);
  });
  await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
  const bport = (backend.address() as net.AddressInfo).port;
  const { f, socket, close } = await openOneService(bport, AFFINITY, { threads: THREADS });
  const { address, port } = socket.addr();
  for (let i = 0; i < 200; i++) await once(port, address); // warm-up: rings grown, buffers made
  const pid = f.helperPid() as number;
  const out = join(tmpdir(), `helper-strace-${process.pid}.txt`);
  const tids = readdirSync(`/proc/${pid}/task`);
  const strace: ChildProcess = spawn(
    'strace',
    [...(process.env.STRACE_FULL ? ['-tt'] : ['-c']), '-o', out, ...tids.flatMap((t) => ['-p', t])],
    { stdio: 'ignore' },
  );
  // Attached once every thread names a tracer.
  for (let i = 0; i < 200; i++) {
    const traced = tids.every((t) =>
      /TracerPid:\s+[1-9]/.test(readFileSync(`/proc/${pid}/task/${t}/status`, 'utf8')),
    );
    if (traced) break;
    await sleep(25);
  }
  const before = { ...f.counters };
  for (let i = 0; i < N; i++) await once(port, address);
  await sleep(1200); // the helper's last closes, its once-a-second sweep
  const done = new Promise((r) => strace.once('exit', r));
  strace.kill('SIGINT');
  await done;
  const text = readFileSync(out, 'utf8');
  if (process.env.STRACE_FULL) console.log(text);
  rmSync(out, { force: true });
  const rows: [string, number][] = [];
  for (const line of text.split('\n')) {
    const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$/.exec(line);
    if (m?.[1] !== undefined && m[2] !== undefined && m[2] !== 'total')
      rows.push([m[2], Number(m[1])]);
  }
  rows.sort((a, b) => b[1] - a[1]);
  const dialsAhead = f.counters.dialsAhead - before.dialsAhead;
  const asked = f.counters.dialsAsked - before.dialsAsked;
  console.log(
    `${N} connections, ${THREADS} helper thread(s), ${AFFINITY === 'None' ? 'picks made ahead' : 'per-accept'} (${dialsAhead} dialled ahead, ${asked} asked of Node)`,
  );
  let total = 0;
  for (const [name, calls] of rows) {
    total += calls;
    console.log(`${(calls / N).toFixed(2).padStart(7)}  ${name}`);
  }
  console.log(`${(total / N).toFixed(2).padStart(7)}  total per connection`);
  await close();
  backend.close();
}

await main();
