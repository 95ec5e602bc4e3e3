// Longer than 400 lines because it is one script: each scenario (accepts, TCP and UDP ping-pong)
// shares the process handling, the /proc readers and the report, which are read with them.
/**
 * CPU cost per unit of work of a proxy process: CPU-µs per accepted connection and per 64 B
 * ping-pong round trip (TCP and UDP), read from /proc/<pid>/stat (utime + stime) before and after a
 * fixed number of units, not a fixed time. On a loaded shared machine wall-clock throughput says
 * little, but the CPU a process spends on a fixed amount of work barely moves with the load, so
 * this compares builds (or the daemon and the naive relay) on the same machine in one session,
 * interleaved A, B, A, B.
 *
 * usage: tsx bench/src/cpu-cost.ts [--subject label=path/to/main.js | --subject naive]...
 *        [--conns 10000] [--concurrency 32] [--pings 20000] [--udp-pings 20000] [--reps 3]
 *        [--udp-window 32] [--only conn,ping,udp,udpw] [--node-arg ARG]...   (e.g. --node-arg --cpu-prof-dir=/tmp/prof
 *        --node-arg --cpu-prof to profile the proxy) [--callgrind] [--attach 'strace -c -f -p']
 *
 * --callgrind runs the proxy under `valgrind --tool=callgrind` and prints instructions per unit
 * instead of CPU-µs (the unit of the table is then instructions, not µs); the counters are zeroed
 * after the warm-up and dumped after each measure with callgrind_control, so startup and the JIT's
 * first compilations are left out (add `--node-arg --jitless` for counts that never depend on when
 * V8 optimises). Use small counts (--conns 1000 --pings 2000): valgrind runs the proxy some 50
 * times slower.
 *
 * `udpw` is the UDP ping-pong with `--udp-window` datagrams in flight on the one client socket: the
 * proxy then reads in batches, as under a flood, so its figure is the batched cost per datagram
 * pair (the figure behind `iperf3 -u -b 0` throughput) without the losses of a real flood. It is
 * not in the default `--only`: add it (`--only udp,udpw`).
 *
 * Each subject runs as users run it: the daemon with a config file in service-port-portal mode on
 * a random loopback address (the same config as `pnpm bench --peers`), the naive relay as
 * bench/src/peers/helpers/naive-relay.mjs. The backend is a separate Node process (a one-reply
 * "HTTP" server that closes after answering, and TCP/UDP echo servers), so only the proxy's own
 * CPU is counted. The figures are medians over the repetitions.
 *
 * This file is longer than 400 lines because it is one self-contained script (argument parsing,
 * backend, load generators, /proc and callgrind readers, the table), run by `tsx` on its own.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import dgram from 'node:dgram';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  daemonConfig,
  daemonServices,
  PORTS,
  randomLayout,
  TCP_PORTS,
  UDP_PORTS,
} from './peers/configs.js';

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ, 100 on every Linux this runs on). */
const USER_HZ = 100;

/** A proxy to measure. */
interface Subject {
  label: string;
  /** The daemon's main.js, or undefined for the naive relay. */
  main: string | undefined;
}

interface Args {
  subjects: Subject[];
  conns: number;
  concurrency: number;
  pings: number;
  udpPings: number;
  /** Datagrams in flight for the `udpw` measure. */
  udpWindow: number;
  reps: number;
  only: Set<string>;
  /** Extra arguments for the proxy's node (e.g. --cpu-prof). */
  nodeArgs: string[];
  /** Run the proxy under callgrind and count its instructions per unit instead of its CPU time. */
  callgrind: boolean;
  /** A command run with the proxy's pid appended while each measure runs (`strace -c -f -p`). */
  attach: string[] | undefined;
}

function parseArgs(argv: readonly string[]): Args {
  const args: Args = {
    subjects: [],
    conns: 10_000,
    concurrency: 32,
    pings: 20_000,
    udpPings: 20_000,
    udpWindow: 32,
    reps: 3,
    only: new Set(['conn', 'ping', 'udp']),
    nodeArgs: [],
    callgrind: false,
    attach: undefined,
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--callgrind') {
      args.callgrind = true;
      continue;
    }
    const value = argv[i + 1] ?? '';
    i++;
    if (flag === '--subject') {
      if (value === 'naive') args.subjects.push({ label: 'naive', main: undefined });
      else {
        const eq = value.indexOf('=');
        if (eq <= 0)
          throw new Error(`--subject wants label=path/to/main.js or naive, got "${value}"`);
        args.subjects.push({ label: value.slice(0, eq), main: value.slice(eq + 1) });
      }
    } else if (flag === '--conns') args.conns = Number(value);
    else if (flag === '--concurrency') args.concurrency = Number(value);
    else if (flag === '--pings') args.pings = Number(value);
    else if (flag === '--udp-pings') args.udpPings = Number(value);
    else if (flag === '--udp-window') args.udpWindow = Number(value);
    else if (flag === '--reps') args.reps = Number(value);
    else if (flag === '--only') args.only = new Set(value.split(','));
    else if (flag === '--node-arg') args.nodeArgs.push(value);
    else if (flag === '--attach') args.attach = value.split(' ').filter(Boolean);
    else throw new Error(`unknown argument ${String(flag)}`);
  }
  if (args.subjects.length === 0) {
    const main = fileURLToPath(new URL('../../packages/server/dist/main.js', import.meta.url));
    args.subjects.push({ label: 'daemon', main });
  }
  return args;
}

/** The backend, as plain JavaScript run by a Node of its own. */
const BACKEND = `
import net from 'node:net';
import dgram from 'node:dgram';
const [ip, http, echo] = process.argv.slice(1);
net.createServer({ noDelay: true }, (s) => {
  s.on('error', () => {});
  s.once('data', () => s.end('HTTP/1.1 200 OK\\r\\ncontent-length: 3\\r\\nconnection: close\\r\\n\\r\\nok\\n'));
}).listen({ host: ip, port: Number(http), backlog: 4096 });
net.createServer({ noDelay: true }, (s) => {
  s.on('error', () => {});
  s.on('data', (d) => s.write(d));
}).listen({ host: ip, port: Number(echo) });
const u = dgram.createSocket('udp4');
u.on('message', (m, r) => u.send(m, r.port, r.address));
u.bind(Number(echo), ip);
`;

/** utime + stime of `pid`, in seconds. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name may contain spaces: fields are counted after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / USER_HZ;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** One HTTP-like exchange on a new connection: connect, send, read the answer until the FIN. */
function oneConnection(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port, noDelay: true });
    let got = 0;
    socket.on('connect', () =>
      socket.write('GET / HTTP/1.1\r\nhost: b\r\nconnection: close\r\n\r\n'),
    );
    socket.on('data', (d) => {
      got += d.length;
    });
    socket.on('end', () => {
      socket.destroy();
      if (got > 0) resolve();
      else reject(new Error('no answer'));
    });
    socket.on('error', reject);
  });
}

/** `count` connections, `concurrency` at a time. */
async function connections(host: string, port: number, count: number, concurrency: number) {
  let started = 0;
  const worker = async () => {
    while (started < count) {
      started++;
      await oneConnection(host, port);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
}

/** `count` 64 B round trips on one TCP connection. */
function tcpPings(host: string, port: number, count: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port, noDelay: true });
    const payload = Buffer.alloc(64, 0x61);
    let left = count;
    let got = 0;
    socket.on('connect', () => socket.write(payload));
    socket.on('data', (d) => {
      got += d.length;
      if (got < payload.length) return;
      got -= payload.length;
      if (--left === 0) {
        socket.destroy();
        resolve();
      } else socket.write(payload);
    });
    socket.on('error', reject);
  });
}

/** `count` 64 B round trips over UDP (a lost datagram is re-sent after 200 ms). */
function udpPings(host: string, port: number, count: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = dgram.createSocket('udp4');
    const payload = Buffer.alloc(64, 0x62);
    let left = count;
    let timer: NodeJS.Timeout | undefined;
    const send = () => {
      clearTimeout(timer);
      timer = setTimeout(send, 200);
      socket.send(payload, port, host);
    };
    socket.on('message', () => {
      if (--left === 0) {
        clearTimeout(timer);
        socket.close();
        resolve();
      } else send();
    });
    socket.on('error', reject);
    socket.bind(0, '127.0.0.1', send);
  });
}

/**
 * `count` 64 B round trips over UDP with `window` datagrams in flight (the backend echoes each); a
 * window lost on the way is refilled after a second without progress (long enough for callgrind,
 * so that a slow proxy is not sent duplicates it would answer after the measure).
 */
function udpWindowPings(host: string, port: number, count: number, window: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = dgram.createSocket('udp4');
    const payload = Buffer.alloc(64, 0x63);
    let left = count;
    let sent = 0;
    let seen = -1;
    const send = (n: number) => {
      for (let i = 0; i < n; i++) socket.send(payload, port, host);
      sent += n;
    };
    const watchdog = setInterval(() => {
      if (seen === left) send(Math.min(window, left));
      seen = left;
    }, 1000);
    socket.on('message', () => {
      if (--left === 0) {
        clearInterval(watchdog);
        socket.close();
        resolve();
      } else if (sent < count) send(1);
    });
    socket.on('error', reject);
    socket.bind(0, '127.0.0.1', () => send(Math.min(window, count)));
  });
}

async function waitUp(
  host: string,
  port: number,
  child: ChildProcess,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the proxy exited (${child.exitCode})`);
    try {
      await oneConnection(host, port);
      return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await sleep(100);
    }
  }
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.once('exit', () => {
      clearTimeout(kill);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

/** µs of proxy CPU per unit for one measure. */
type Measure = 'conn' | 'ping' | 'udp' | 'udpw';

async function runSubject(
  subject: Subject,
  args: Args,
  dir: string,
): Promise<Partial<Record<Measure, number>>> {
  const layout = randomLayout();
  const ip = subject.main === undefined ? layout.peers.naive : layout.peers.daemon;
  const d = mkdtempSync(join(dir, `${subject.label}-`));
  let nodeArgs: string[];
  if (subject.main === undefined) {
    const script = fileURLToPath(new URL('./peers/helpers/naive-relay.mjs', import.meta.url));
    nodeArgs = [script, ip, layout.backend, TCP_PORTS.join(','), UDP_PORTS.join(',')];
  } else {
    writeFileSync(join(d, 'config.yaml'), daemonConfig(layout));
    writeFileSync(join(d, 'services.yaml'), daemonServices(layout));
    nodeArgs = [subject.main, '--config', join(d, 'config.yaml')];
  }
  const cgOut = join(d, 'callgrind.out');
  const child = args.callgrind
    ? spawn(
        'valgrind',
        [
          '--tool=callgrind',
          `--callgrind-out-file=${cgOut}`,
          process.execPath,
          ...args.nodeArgs,
          ...nodeArgs,
        ],
        { cwd: d, stdio: 'ignore' },
      )
    : spawn(process.execPath, [...args.nodeArgs, ...nodeArgs], { cwd: d, stdio: 'ignore' });
  const backend = spawn(
    process.execPath,
    ['--input-type=module', '-e', BACKEND, layout.backend, `${PORTS.http}`, `${PORTS.sockperf}`],
    { stdio: 'inherit' },
  );
  const out: Partial<Record<Measure, number>> = {};
  try {
    await waitUp(ip, PORTS.http, child, args.callgrind ? 300_000 : 30_000);
    const pid = child.pid as number;
    const measure = async (name: Measure, units: number, work: () => Promise<void>) => {
      if (args.callgrind) {
        run('callgrind_control', ['-z', `${pid}`]);
        await work();
        run('callgrind_control', ['-d', `${pid}`]);
        out[name] = lastCallgrindTotal(d) / units;
        return;
      }
      const tracer =
        args.attach === undefined
          ? undefined
          : spawn(args.attach[0] as string, [...args.attach.slice(1), `${pid}`], {
              stdio: 'inherit',
            });
      if (tracer !== undefined) await sleep(1000);
      const before = cpuSeconds(pid);
      await work();
      out[name] = ((cpuSeconds(pid) - before) / units) * 1e6;
      if (tracer !== undefined) {
        tracer.kill('SIGINT');
        await new Promise((resolve) => tracer.once('exit', resolve));
      }
    };
    if (args.only.has('conn')) {
      await connections(ip, PORTS.http, Math.min(2000, args.conns), args.concurrency);
      await measure('conn', args.conns, () =>
        connections(ip, PORTS.http, args.conns, args.concurrency),
      );
    }
    if (args.only.has('ping')) {
      await tcpPings(ip, PORTS.sockperf, Math.min(2000, args.pings));
      await measure('ping', args.pings, () => tcpPings(ip, PORTS.sockperf, args.pings));
    }
    if (args.only.has('udp')) {
      await udpPings(ip, PORTS.sockperf, Math.min(2000, args.udpPings));
      await measure('udp', args.udpPings, () => udpPings(ip, PORTS.sockperf, args.udpPings));
    }
    if (args.only.has('udpw')) {
      const n = args.udpPings;
      await udpWindowPings(ip, PORTS.sockperf, Math.min(2000, n), args.udpWindow);
      await measure('udpw', n, () => udpWindowPings(ip, PORTS.sockperf, n, args.udpWindow));
    }
  } finally {
    await Promise.all([stop(child), stop(backend)]);
  }
  return out;
}

function run(command: string, argv: string[]): void {
  const r = spawnSync(command, argv, { stdio: 'ignore' });
  if (r.status !== 0) throw new Error(`${command} ${argv.join(' ')} failed (${String(r.status)})`);
}

/** The instruction count of the newest callgrind dump in `dir` (its `totals:` or `summary:` line). */
function lastCallgrindTotal(dir: string): number {
  const dumps = readdirSync(dir)
    .filter((f) => f.startsWith('callgrind.out.'))
    .map((f) => join(dir, f))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  const text = readFileSync(dumps[0] as string, 'utf8');
  const line = /^(?:totals|summary): (\d+)/m.exec(text);
  if (line === null) throw new Error(`no totals in ${String(dumps[0])}`);
  return Number(line[1]);
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1
    ? (s[mid] as number)
    : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const dir = mkdtempSync(join(tmpdir(), 'cpu-cost-'));
  mkdirSync(dir, { recursive: true });
  const results = new Map<string, Record<Measure, number[]>>();
  for (const s of args.subjects) results.set(s.label, { conn: [], ping: [], udp: [], udpw: [] });
  try {
    for (let rep = 1; rep <= args.reps; rep++) {
      for (const subject of args.subjects) {
        const r = await runSubject(subject, args, dir);
        const row = results.get(subject.label) as Record<Measure, number[]>;
        for (const m of ['conn', 'ping', 'udp', 'udpw'] as const) {
          const v = r[m];
          if (v !== undefined) row[m].push(v);
        }
        const shown = Object.entries(r)
          .map(([k, v]) => `${k} ${v.toFixed(1)}${args.callgrind ? ' instructions' : ' µs'}`)
          .join(', ');
        console.log(`rep ${rep} ${subject.label}: ${shown}`);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const unit = args.callgrind ? 'instructions' : 'µs of CPU';
  console.log(`\nproxy ${unit} per unit, median of repetitions:`);
  console.log(
    args.callgrind
      ? '| subject | instructions per connection | per TCP round trip | per UDP round trip | per UDP round trip, windowed |'
      : '| subject | CPU-s per 10 000 connections | µs per TCP round trip | µs per UDP round trip | µs per UDP round trip, windowed |',
  );
  console.log('|---|---|---|---|---|');
  for (const [label, row] of results) {
    const cell = (xs: number[], scale: number) => {
      if (xs.length === 0) return '–';
      const v = median(xs) * scale;
      return args.callgrind
        ? Math.round(v).toLocaleString('en-US')
        : v.toFixed(scale === 1 ? 1 : 2);
    };
    const connScale = args.callgrind ? 1 : 0.01;
    console.log(
      `| ${label} | ${cell(row.conn, connScale)} | ${cell(row.ping, 1)} | ${cell(row.udp, 1)} | ${cell(row.udpw, 1)} |`,
    );
  }
}

await main();
