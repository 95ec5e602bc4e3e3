import type { ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import {
  DAEMON_WORKERS,
  daemonConfig,
  daemonServices,
  haproxyConfig,
  type Layout,
  nginxHttpBackendConfig,
  nginxStreamConfig,
  type PeerId,
  PORTS,
  TCP_PORTS,
  UDP_PORTS,
} from './configs.js';
import type { Processes } from './processes.js';
import type { Toolbox } from './tools.js';

/** A subject that is up: where to send traffic, and the process whose CPU and memory count. */
export interface RunningPeer {
  id: PeerId;
  address: string;
  /** The root of the proxy's process tree (nginx's master, the daemon's node). */
  pid: number;
  /** False for HAProxy: the UDP measures are left out for it. */
  udp: boolean;
  /** The process started, to stop it (and restart the peer fresh for the idle test). */
  child: ChildProcess;
}

/**
 * Flags for `node` while the idle test runs on a Node subject (it is restarted with them, and
 * restarted again without them afterwards). V8 sizes its young generation by the recent allocation
 * rate, from 1 MiB up to 16 MiB per semi-space, and gives it back at moments of its own choosing:
 * between the test's two readings it can grow or shrink by up to 32 MiB, which over 6 000
 * connections is ±5 KB each and swamped the reading (session 14: −1.7 KB for the daemon, +3.8 in
 * another run). Pinned at 1 MiB, the two readings differ by what the connections hold (old
 * generation, libuv and kernel-facing allocations); the fixed cost the young generation has in a
 * process that runs with default flags is stated beside the figure in docs/benchmarks.md.
 */
export const IDLE_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=1'];

/** The hex form /proc/net/{tcp,udp} print a local IPv4 address and port in (little-endian host). */
export function procNetAddress(ip: string, port: number): string {
  const hex = (n: number) => n.toString(16).toUpperCase().padStart(2, '0');
  const addr = ip.split('.').map(Number).reverse().map(hex).join('');
  return `${addr}:${port.toString(16).toUpperCase().padStart(4, '0')}`;
}

/**
 * Whether something listens on ip:port, read from /proc/net (TCP state 0A = LISTEN; UDP state 07 =
 * an unconnected bound socket). Looking, not connecting: a probe connection would count as a test
 * to iperf3's server and as an idle connection to the holder.
 */
export function isListening(
  proto: 'tcp' | 'udp',
  ip: string,
  port: number,
  table = readFileSync(`/proc/net/${proto}`, 'utf8'),
): boolean {
  const want = procNetAddress(ip, port);
  const state = proto === 'tcp' ? '0A' : '07';
  for (const line of table.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f[1] === want && f[3] === state) return true;
  }
  return false;
}

/** Waits until every listed port listens, or the child exits, or 15 s pass. */
async function waitListening(
  child: ChildProcess,
  ip: string,
  tcp: readonly number[],
  udp: readonly number[],
  deadlineMs = 15_000,
): Promise<string | null> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      return `exited (${child.exitCode ?? child.signalCode}) before listening`;
    }
    const tcpTable = readFileSync('/proc/net/tcp', 'utf8');
    const udpTable = readFileSync('/proc/net/udp', 'utf8');
    const missing = [
      ...tcp.filter((p) => !isListening('tcp', ip, p, tcpTable)).map((p) => `tcp/${p}`),
      ...udp.filter((p) => !isListening('udp', ip, p, udpTable)).map((p) => `udp/${p}`),
    ];
    if (missing.length === 0) return null;
    if (Date.now() > end)
      return `not listening on ${ip} ${missing.join(', ')} after ${deadlineMs} ms`;
    await sleep(50);
  }
}

function tail(file: string, lines = 8): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join(' ⏎ ').slice(-800);
  } catch {
    return '';
  }
}

/** The servers direct traffic ends at; every subject forwards to them. */
export interface Backends {
  /** The idle-connection holder, asked how many connections it holds. */
  holder: ChildProcess;
  ok: { iperf: boolean; http: boolean; sockperf: boolean };
}

/**
 * Starts the backends on `layout.backend`: iperf3's server (TCP and UDP), sockperf's servers (TCP
 * and UDP), nginx serving HTTP for wrk, and the idle-connection holder. A backend whose tool is
 * missing is left out (its measures are skipped); one that fails to start throws.
 */
export async function startBackends(
  procs: Processes,
  box: Toolbox,
  layout: Layout,
  dir: string,
  notes: string[],
): Promise<Backends> {
  const ip = layout.backend;
  const ok = { iperf: false, http: false, sockperf: false };
  const start = async (
    name: string,
    cmd: string,
    args: string[],
    tcp: number[],
    udp: number[],
  ): Promise<ChildProcess> => {
    const log = join(dir, `${name}.log`);
    const child = procs.server(cmd, args, log);
    const problem = await waitListening(child, ip, tcp, udp);
    if (problem) throw new Error(`backend ${name} ${problem}: ${tail(log)}`);
    return child;
  };
  if (box.paths.iperf3) {
    await start(
      'iperf3-server',
      box.paths.iperf3,
      ['-s', '-B', ip, '-p', `${PORTS.iperf}`],
      [PORTS.iperf],
      [],
    );
    ok.iperf = true;
  }
  if (box.paths.sockperf) {
    const base = ['server', '-i', ip, '-p', `${PORTS.sockperf}`];
    await start('sockperf-tcp', box.paths.sockperf, [...base, '--tcp'], [PORTS.sockperf], []);
    await start('sockperf-udp', box.paths.sockperf, base, [], [PORTS.sockperf]);
    ok.sockperf = true;
  }
  if (box.paths.nginx) {
    const d = join(dir, 'nginx-http');
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, 'nginx.conf'), nginxHttpBackendConfig(layout, d));
    await start(
      'nginx-http',
      box.paths.nginx,
      ['-p', d, '-c', join(d, 'nginx.conf'), '-e', 'stderr'],
      [PORTS.http],
      [],
    );
    ok.http = true;
  } else
    notes.push(
      'nginx is missing: no HTTP backend, so the new-connection measures (wrk) are skipped.',
    );
  const holderScript = fileURLToPath(new URL('./helpers/idle-conns.mjs', import.meta.url));
  const holder = procs.piped(process.execPath, [holderScript, 'hold', ip, `${PORTS.idle}`]);
  const problem = await waitListening(holder, ip, [PORTS.idle], []);
  if (problem) throw new Error(`idle-connection holder ${problem}`);
  return { holder, ok };
}

/** Options for the daemon subject. */
export interface DaemonOptions {
  /** packages/server/dist/main.js. */
  main: string;
  /** Extra arguments after `--config FILE` (`--daemon-arg`), e.g. a worker count to compare. */
  extraArgs: string[];
  /** Flags for node itself, before the script (`--daemon-node-arg`), e.g. `--optimize-for-size`. */
  nodeArgs: string[];
}

/**
 * Starts one peer and waits until it listens on every port it proxies. Returns null (with a note)
 * when its tool is missing or it does not come up, so the rest of the run goes on without it.
 * `nodeFlags` go to `node` for the Node subjects (the naive relay and the daemons) and are ignored
 * for HAProxy and nginx: the idle test's young-generation cap ({@link IDLE_NODE_FLAGS}).
 */
export async function startPeer(
  id: PeerId,
  procs: Processes,
  box: Toolbox,
  layout: Layout,
  dir: string,
  daemon: DaemonOptions,
  notes: string[],
  nodeFlags: readonly string[] = [],
): Promise<RunningPeer | null> {
  const ip = layout.peers[id];
  const d = join(dir, id);
  mkdirSync(d, { recursive: true });
  const log = join(d, 'out.log');
  let child: ChildProcess;
  let udp = true;
  if (id === 'haproxy') {
    if (!box.paths.haproxy) return skip(notes, id, 'haproxy is not installed');
    writeFileSync(join(d, 'haproxy.cfg'), haproxyConfig(layout));
    child = procs.server(box.paths.haproxy, ['-f', join(d, 'haproxy.cfg'), '-db'], log);
    udp = false;
  } else if (id === 'nginx') {
    if (!box.paths.nginx || !box.streamModule) {
      return skip(notes, id, 'nginx or libnginx-mod-stream is not installed');
    }
    writeFileSync(join(d, 'nginx.conf'), nginxStreamConfig(layout, d, box.streamModule));
    child = procs.server(
      box.paths.nginx,
      ['-p', d, '-c', join(d, 'nginx.conf'), '-e', 'stderr'],
      log,
    );
  } else if (id === 'naive') {
    const script = fileURLToPath(new URL('./helpers/naive-relay.mjs', import.meta.url));
    const args = [
      ...nodeFlags,
      script,
      ip,
      layout.backend,
      TCP_PORTS.join(','),
      UDP_PORTS.join(','),
    ];
    child = procs.server(process.execPath, args, log);
  } else {
    writeFileSync(join(d, 'config.yaml'), daemonConfig(layout, id));
    writeFileSync(join(d, 'services.yaml'), daemonServices(layout, id));
    const workers = ['--workers', String(DAEMON_WORKERS[id])];
    const args = [
      ...daemon.nodeArgs,
      ...nodeFlags,
      daemon.main,
      '--config',
      join(d, 'config.yaml'),
      ...workers,
      ...daemon.extraArgs,
    ];
    child = procs.server(process.execPath, args, log, d);
  }
  // Workers each load the daemon before they listen: give a daemon more time than a C server.
  const deadline = id === 'daemon' || id === 'daemon2' || id === 'native' ? 45_000 : undefined;
  const problem = await waitListening(child, ip, TCP_PORTS, udp ? UDP_PORTS : [], deadline);
  if (problem || child.pid === undefined) {
    await procs.stop(child);
    return skip(notes, id, `did not start: ${problem}: ${tail(log)}`);
  }
  return { id, address: ip, pid: child.pid, udp, child };
}

function skip(notes: string[], id: PeerId, why: string): null {
  notes.push(`${id} skipped: ${why}.`);
  return null;
}
