/**
 * CPU of the TCP helper per GB relayed: iperf3 through a socket of `withNativeTcp` in this process
 * to an iperf3 server, the helper's utime + stime (`/proc/<pid>/stat`) over the run divided by the
 * bytes iperf3 received. CPU per byte depends little on the machine's load, unlike throughput.
 * Subjects are helper binaries (built with different settings), run in turn, `--reps` times each.
 *
 *   npx tsx packages/native/scripts/bulk-cpu-per-gb.ts [--reps N] [--seconds S] [--streams P] NAME=BINARY...
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { openOneService } from './one-service.js';

const arg = (flag: string, def: number): number => {
  const i = process.argv.indexOf(flag);
  return i < 0 ? def : Number(process.argv[i + 1]);
};
const REPS = arg('--reps', 3);
const SECONDS = arg('--seconds', 3);
const STREAMS = arg('--streams', 1);
const subjects = process.argv
  .slice(2)
  .filter((a) => /^[\w-]+=/.test(a))
  .map((a) => a.split('=', 2) as [string, string]);

function cpuTicks(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return Number(rest[11]) + Number(rest[12]); // utime, stime (fields 14, 15)
}
const HZ = Number(spawnSync('getconf', ['CLK_TCK']).stdout.toString().trim()) || 100;

async function run(name: string, helperPath: string, serverPort: number): Promise<string> {
  const { f, socket, close } = await openOneService(serverPort, 'None', { helperPath });
  const pid = f.helperPid() as number;
  const before = cpuTicks(pid);
  const out = await new Promise<string>((resolve) => {
    const c = spawn('iperf3', [
      '-c',
      '127.0.0.1',
      '-p',
      String(socket.addr().port),
      '-t',
      String(SECONDS),
      '-P',
      String(STREAMS),
      '-J',
    ]);
    let text = '';
    c.stdout.on('data', (d: Buffer) => {
      text += d.toString();
    });
    c.on('exit', () => resolve(text));
  });
  const cpu = (cpuTicks(pid) - before) / HZ;
  const bytes = JSON.parse(out).end.sum_received.bytes as number;
  await close();
  return `${name}: ${(bytes / 1e9).toFixed(2)} GB, helper ${cpu.toFixed(2)} CPU-s, ${(cpu / (bytes / 1e9)).toFixed(3)} CPU-s/GB, ${((bytes * 8) / SECONDS / 1e9).toFixed(1)} Gbit/s`;
}

const port = 20000 + Math.floor(Math.random() * 20000);
const server = spawn('iperf3', ['-s', '-p', String(port), '-B', '127.0.0.1'], { stdio: 'ignore' });
await new Promise((r) => setTimeout(r, 500));
try {
  for (let r = 0; r < REPS; r++)
    for (const [name, path] of subjects) console.log(await run(name, path, port));
} finally {
  server.kill();
}
