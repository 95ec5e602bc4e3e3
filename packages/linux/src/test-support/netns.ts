import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import {
  type CommandResult,
  type CommandRunner,
  commandOutput,
  ExecCommandRunner,
  formatCommand,
  prefixedCommandRunner,
} from '../command-runner.js';

/**
 * Network namespaces for tests that need a real kernel (iptables, conntrack, ip addr): each test
 * file makes its own uniquely named namespaces, so parallel files never meet, and removes them in
 * afterAll. Nothing here touches the host's own namespace except creating and deleting ours.
 */

/** Whether namespace tests can run here, and if not, why (for `it.skipIf(...)` messages). */
export interface NetnsSupport {
  ok: boolean;
  reason: string;
}

/** True when `tool` is an executable on PATH (or in the sbin directories root usually has). */
export function hasTool(tool: string): boolean {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/sbin'];
  return dirs.some((dir) => {
    if (dir === '') return false;
    try {
      accessSync(join(dir, tool), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

let probed: NetnsSupport | undefined;

/**
 * Checks, synchronously so that it can feed `skipIf`, that we are root on Linux, that `tools` are
 * installed, and that a namespace can really be created (a container may lack CAP_SYS_ADMIN).
 */
export function netnsSupport(tools: readonly string[] = []): NetnsSupport {
  if (process.platform !== 'linux') return { ok: false, reason: 'not Linux' };
  if (process.getuid?.() !== 0) return { ok: false, reason: 'not root' };
  for (const tool of ['ip', ...tools]) {
    if (!hasTool(tool)) return { ok: false, reason: `${tool} is not installed` };
  }
  if (!probed) {
    const name = uniqueName('up-probe');
    try {
      execFileSync('ip', ['netns', 'add', name], { stdio: 'pipe' });
      execFileSync('ip', ['netns', 'del', name], { stdio: 'pipe' });
      probed = { ok: true, reason: '' };
    } catch (error) {
      probed = { ok: false, reason: `cannot create network namespaces: ${String(error)}` };
    }
  }
  return probed;
}

/** A short random name; interface names must stay under 16 bytes. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`;
}

/** One namespace this test made. */
export interface Netns {
  readonly name: string;
  /** Runs commands inside the namespace (`ip netns exec NAME …`). */
  readonly runner: CommandRunner;
  /** Runs a command inside; rejects when it exits non-zero. */
  exec(cmd: string, args: readonly string[]): Promise<string>;
}

const host = new ExecCommandRunner({ timeoutMs: 20_000 });

async function mustRun(
  runner: CommandRunner,
  cmd: string,
  args: readonly string[],
): Promise<string> {
  const r: CommandResult = await runner.run(cmd, args);
  if (r.code !== 0) {
    throw new Error(`${formatCommand(cmd, args)} exited ${r.code}: ${commandOutput(r)}`);
  }
  return r.stdout;
}

/** Options of {@link NetnsSandbox.link}. */
export interface VethOptions {
  /** "10.201.0.1/30" style, the address in `a`. */
  addressA: string;
  addressB: string;
}

/**
 * Creates namespaces, veth pairs and child processes, and removes all of them in `cleanup()`
 * (call it in afterAll; it never throws, so one failure does not leave the rest behind).
 */
export class NetnsSandbox {
  readonly #namespaces: string[] = [];
  readonly #children = new Set<ChildProcess>();
  readonly #onExit = (): void => this.#cleanupSync();

  constructor() {
    process.once('exit', this.#onExit);
  }

  /** A new namespace with its loopback up. */
  async namespace(): Promise<Netns> {
    const name = uniqueName('up-test');
    await mustRun(host, 'ip', ['netns', 'add', name]);
    this.#namespaces.push(name);
    const runner = prefixedCommandRunner(['ip', 'netns', 'exec', name], host);
    await mustRun(runner, 'ip', ['link', 'set', 'lo', 'up']);
    return { name, runner, exec: (cmd, args) => mustRun(runner, cmd, args) };
  }

  /** A veth pair from `a` to `b`, addressed and up. Resolves with the interface names. */
  async link(
    a: Netns,
    b: Netns,
    options: VethOptions,
  ): Promise<{ ifaceA: string; ifaceB: string }> {
    const ifaceA = uniqueName('upv');
    const ifaceB = uniqueName('upw');
    await mustRun(host, 'ip', [
      'link',
      'add',
      ifaceA,
      'netns',
      a.name,
      'type',
      'veth',
      'peer',
      'name',
      ifaceB,
      'netns',
      b.name,
    ]);
    await a.exec('ip', ['addr', 'add', options.addressA, 'dev', ifaceA]);
    await b.exec('ip', ['addr', 'add', options.addressB, 'dev', ifaceB]);
    await a.exec('ip', ['link', 'set', ifaceA, 'up']);
    await b.exec('ip', ['link', 'set', ifaceB, 'up']);
    return { ifaceA, ifaceB };
  }

  /**
   * A node and a client: two namespaces linked by a veth pair (`addressA` in the node, `addressB` in
   * the client) with a route in the client that sends `serviceRange` through the node, so the
   * client's traffic to Service IPs meets the node's rules.
   */
  async nodeAndClient(
    options: VethOptions & { serviceRange: string },
  ): Promise<{ node: Netns; client: Netns }> {
    const node = await this.namespace();
    const client = await this.namespace();
    await this.link(node, client, options);
    const via = options.addressA.slice(0, options.addressA.indexOf('/'));
    await client.exec('ip', ['route', 'add', options.serviceRange, 'via', via]);
    return { node, client };
  }

  /** Starts `node -e script args…` inside `ns`; it is killed at cleanup. */
  spawnNode(ns: Netns, script: string, args: readonly string[] = []): ChildProcess {
    const child = spawn('ip', ['netns', 'exec', ns.name, process.execPath, '-e', script, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.#children.add(child);
    child.once('exit', () => this.#children.delete(child));
    return child;
  }

  /**
   * Starts `argv` (a program and its arguments) inside `ns` with stdin, stdout and stderr piped, for
   * a child driven by commands on stdin; `ip netns exec` execs it, so the pid is the program's own
   * and a signal reaches it directly. It is killed at cleanup.
   */
  spawnIn(
    ns: Netns,
    argv: readonly string[],
    options: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
  ): ChildProcess {
    const child = spawn('ip', ['netns', 'exec', ns.name, ...argv], {
      stdio: ['pipe', 'pipe', 'pipe'],
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
      ...(options.env === undefined ? {} : { env: options.env }),
    });
    this.#children.add(child);
    child.once('exit', () => this.#children.delete(child));
    return child;
  }

  /** Kills children and deletes namespaces (their veths go with them). Never throws. */
  async cleanup(): Promise<void> {
    for (const child of this.#children) child.kill('SIGKILL');
    this.#children.clear();
    for (const name of this.#namespaces.splice(0)) {
      await host.run('ip', ['netns', 'del', name]).catch(() => undefined);
    }
    process.removeListener('exit', this.#onExit);
  }

  #cleanupSync(): void {
    for (const child of this.#children) child.kill('SIGKILL');
    for (const name of this.#namespaces.splice(0)) {
      try {
        execFileSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
      } catch {
        // best effort at exit
      }
    }
  }
}

/** Reads the first stdout line of a child (a server printing its port), within `timeoutMs`. */
export function firstLine(child: ChildProcess, timeoutMs = 15_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffered = '';
    let stderr = '';
    const timer = setTimeout(
      () => done(new Error(`no output within ${timeoutMs} ms: ${stderr}`)),
      timeoutMs,
    );
    const onData = (chunk: Buffer): void => {
      buffered += chunk.toString();
      const nl = buffered.indexOf('\n');
      if (nl >= 0) done(undefined, buffered.slice(0, nl));
    };
    const onErr = (chunk: Buffer): void => {
      stderr += chunk.toString();
    };
    const onExit = (code: number | null): void =>
      done(new Error(`exited ${code} before printing: ${stderr}`));
    function done(error: Error | undefined, line?: string): void {
      clearTimeout(timer);
      child.stdout?.off('data', onData);
      child.stderr?.off('data', onErr);
      child.off('exit', onExit);
      if (error) reject(error);
      else resolve(line ?? '');
    }
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onErr);
    child.once('exit', onExit);
  });
}

/** A TCP echo server on `host:0`; prints its port. For `spawnNode`. */
export const TCP_ECHO_SERVER = `
const net = require('node:net');
const server = net.createServer((s) => s.on('data', (d) => s.write('echo:' + d)).on('error', () => {}));
server.listen(0, process.argv[1] || '0.0.0.0', () => console.log(server.address().port));
`;

/** Connects to argv[1]:argv[2], sends argv[3], prints the reply; exits 1 on error or after 10 s. */
export const TCP_CLIENT = `
const net = require('node:net');
const [host, port, text] = process.argv.slice(1);
const timer = setTimeout(() => { console.error('timeout'); process.exit(1); }, 10000);
const s = net.connect({ host, port: Number(port) }, () => s.write(text));
s.on('data', (d) => { process.stdout.write(String(d)); clearTimeout(timer); s.destroy(); });
s.on('error', (e) => { console.error(e.message); process.exit(1); });
`;

/** Sends one UDP datagram from argv[1]:argv[2] (source) to argv[3]:argv[4]; exits when sent. */
export const UDP_SENDER = `
const dgram = require('node:dgram');
const [srcHost, srcPort, host, port] = process.argv.slice(1);
const s = dgram.createSocket(host.includes(':') ? 'udp6' : 'udp4');
s.bind(Number(srcPort), srcHost, () => s.send('ping', Number(port), host, (e) => {
  if (e) { console.error(e.message); process.exit(1); }
  s.close();
}));
`;

/** Runs a node script in `ns` to completion; resolves with its stdout, rejects on a non-zero exit. */
export async function runNode(ns: Netns, script: string, args: readonly string[]): Promise<string> {
  return mustRun(ns.runner, process.execPath, ['-e', script, ...args]);
}

/** A UDP server on `host:0` answering every datagram with "echo:" and the datagram; prints its port. */
export const UDP_ECHO_SERVER = `
const dgram = require('node:dgram');
const host = process.argv[1] || '0.0.0.0';
const s = dgram.createSocket(host.includes(':') ? 'udp6' : 'udp4');
s.on('message', (m, r) => s.send('echo:' + m, r.port, r.address));
s.bind(0, host, () => console.log(s.address().port));
`;

/**
 * Connects to argv[1]:argv[2], sends argv[3] and prints the first reply; when there is none it
 * prints the error code (ECONNREFUSED, EHOSTUNREACH…), CLOSED, or TIMEOUT after argv[4] ms (default
 * 5000). It always exits 0, so a test can expect a refusal as plainly as an answer.
 */
export const TCP_PROBE = `
const net = require('node:net');
const [host, port, text, ms] = process.argv.slice(1);
const out = (v) => { process.stdout.write(String(v)); process.exit(0); };
setTimeout(() => out('TIMEOUT'), Number(ms || 5000));
const s = net.connect({ host, port: Number(port) }, () => s.write(text));
s.on('data', (d) => out(d));
s.on('error', (e) => out(e.code || e.message));
s.on('close', () => out('CLOSED'));
`;

/**
 * Sends argv[3] by UDP to argv[1]:argv[2] and prints the first reply as JSON ({"from":"ip:port",
 * "data":…}, so a test sees which address answered), or TIMEOUT after argv[4] ms (default 5000).
 * It always exits 0.
 */
export const UDP_PROBE = `
const dgram = require('node:dgram');
const [host, port, text, ms] = process.argv.slice(1);
const s = dgram.createSocket(host.includes(':') ? 'udp6' : 'udp4');
const out = (v) => { process.stdout.write(v); process.exit(0); };
setTimeout(() => out('TIMEOUT'), Number(ms || 5000));
s.on('message', (d, r) => out(JSON.stringify({ from: r.address + ':' + r.port, data: String(d) })));
s.on('error', (e) => out(e.code || e.message));
s.send(text, Number(port), host);
`;

/**
 * Our lines of `iptables-save` in `ns` (chains and rules mentioning KUBE-), normalised across the nft
 * and legacy back ends: counters stripped, every comment quoted.
 */
export async function kubeRules(ns: Netns, cmd = 'iptables-save'): Promise<string[]> {
  const out = await ns.exec(cmd, []);
  return out
    .split('\n')
    .filter((l) => l.includes('KUBE-'))
    .map((l) => l.replace(/ \[\d+:\d+\]$/, '').replace(/--comment ([^"\s]+)/, '--comment "$1"'));
}

/** `conntrack -L` in `ns` for flows whose original destination is `ip` (empty when there are none). */
export async function conntrackFlows(ns: Netns, ip: string, protocol = 'udp'): Promise<string> {
  const r = await ns.runner.run('conntrack', ['-L', '-p', protocol, '--orig-dst', ip]);
  return r.stdout;
}

/**
 * The lines of {@link kubeRules} that capture `ip:port` for one protocol: rules in our chains naming
 * that destination, or, with `ip` null, the node-port rules (which name no destination).
 */
export function captureRules(
  rules: readonly string[],
  ip: string | null,
  protocol: 'tcp' | 'udp',
  port: number,
): string[] {
  const dst = ip === null ? '' : `-d ${ip}/32 `;
  return rules.filter(
    (l) =>
      l.startsWith('-A KUBE-') &&
      l.includes(`${dst}-p ${protocol} `) &&
      l.includes(`--dport ${port} `) &&
      (ip !== null || !l.includes(' -d ')),
  );
}
