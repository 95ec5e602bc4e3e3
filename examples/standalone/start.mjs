// `npx -y pnpm@12.4.2 start` (after the build): runs two small backends and the userspace-proxy daemon
// in front of them, prints where to connect, and stops everything on Ctrl-C. Plain Node.js.
//
// Addresses: the Service is on 127.10.0.1 and the backends on the next two addresses. Another copy on
// the same host (CI, another user) takes other ones: `--ip 127.10.1.1` or
// USERSPACE_PROXY_EXAMPLE_IP=127.10.1.1 (any 127.x.y.z address with z ≤ 253; the ports stay the same).
//
// Lifetime: the script and the daemon never outlive the command that started them. Ctrl-C, SIGTERM and
// SIGHUP are passed on to the daemon (which drains and exits); the daemon runs with
// --exit-with-parent, so it stops by itself if this script is killed outright; and this script stops
// if any process above it exits (npx killed by a signal leaves pnpm behind otherwise).
import { spawn } from 'node:child_process';
import dgram from 'node:dgram';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { constants, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));
const root = here('../../');
const DEFAULT_IP = '127.10.0.1';
const HOW_TO_MOVE =
  'Run it on other addresses: USERSPACE_PROXY_EXAMPLE_IP=127.10.1.1 npx -y pnpm@12.4.2 start ' +
  '(or node examples/standalone/start.mjs --ip 127.10.1.1).';

/** The Service address from --ip or USERSPACE_PROXY_EXAMPLE_IP; exits with a message when invalid. */
function serviceAddress(argv, env) {
  let ip = env.USERSPACE_PROXY_EXAMPLE_IP || DEFAULT_IP;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--ip') ip = argv[++i] ?? '';
    else if (arg.startsWith('--ip=')) ip = arg.slice(5);
    else if (arg === '-h' || arg === '--help') {
      console.log(`usage: start.mjs [--ip 127.x.y.z]\n\n${HOW_TO_MOVE}`);
      process.exit(0);
    } else {
      console.error(`unknown argument ${JSON.stringify(arg)}; usage: start.mjs [--ip 127.x.y.z]`);
      process.exit(2);
    }
  }
  const parts = ip.split('.').map(Number);
  const valid =
    net.isIPv4(ip) &&
    parts[0] === 127 &&
    parts[3] !== undefined &&
    parts[3] >= 1 &&
    parts[3] <= 253;
  if (!valid) {
    console.error(
      `${JSON.stringify(ip)} cannot be the example's Service address: give a loopback address 127.x.y.z with z from 1 to 253 (the backends take the next two)`,
    );
    process.exit(2);
  }
  return [ip, ...[1, 2].map((n) => [...parts.slice(0, 3), (parts[3] ?? 0) + n].join('.'))];
}

const [SERVICE_IP, ...BACKENDS] = serviceAddress(process.argv.slice(2), process.env);

/**
 * The configuration and manifest: the example's own files for the default addresses, otherwise
 * copies with the addresses replaced, in a temporary directory removed at exit.
 */
function exampleFiles() {
  const config = here('config.yaml');
  const services = here('services.yaml');
  if (SERVICE_IP === DEFAULT_IP) return { config, services, cleanup: () => {} };
  const dir = mkdtempSync(join(tmpdir(), 'userspace-proxy-example-'));
  const swap = (text) =>
    text
      .replaceAll('127.10.0.1', SERVICE_IP)
      .replaceAll('127.10.0.2', BACKENDS[0])
      .replaceAll('127.10.0.3', BACKENDS[1]);
  writeFileSync(join(dir, 'config.yaml'), swap(readFileSync(config, 'utf8')));
  writeFileSync(join(dir, 'services.yaml'), swap(readFileSync(services, 'utf8')));
  return {
    config: join(dir, 'config.yaml'),
    services: join(dir, 'services.yaml'),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** Fails early, with how to move, when a port the example needs on the Service address is taken. */
async function checkFree() {
  const tcp = [8080, 10256, 10249].map(
    (port) =>
      new Promise((resolve, reject) => {
        const server = net.createServer();
        server.once('error', reject).listen(port, SERVICE_IP, () => server.close(resolve));
      }),
  );
  const udp = new Promise((resolve, reject) => {
    const socket = dgram.createSocket('udp4');
    socket.once('error', reject).bind(5300, SERVICE_IP, () => socket.close(resolve));
  });
  await Promise.all([...tcp, udp]);
}

/** Starts an HTTP and a UDP echo backend on each address. */
async function startBackends() {
  const closers = [];
  for (const ip of BACKENDS) {
    const web = http.createServer((req, res) => {
      res.setHeader('Content-Type', 'text/plain');
      res.setHeader('Connection', 'close');
      res.end(`hello from backend ${ip} (${req.method} ${req.url})\n`);
    });
    await new Promise((resolve, reject) => web.once('error', reject).listen(8080, ip, resolve));
    closers.push(
      () =>
        new Promise((resolve) => {
          web.close(resolve);
          web.closeAllConnections();
        }),
    );
    const echo = dgram.createSocket('udp4');
    echo.on('message', (msg, rinfo) =>
      echo.send(`backend ${ip}: ${msg}`, rinfo.port, rinfo.address),
    );
    await new Promise((resolve, reject) => echo.once('error', reject).bind(5300, ip, resolve));
    closers.push(() => new Promise((resolve) => echo.close(resolve)));
  }
  return () => Promise.all(closers.map((close) => close()));
}

/** True once a TCP connection to the Service address succeeds. */
function reachable() {
  return new Promise((resolve) => {
    const socket = net.connect(8080, SERVICE_IP, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}

/** The processes above this one (Linux: from /proc; elsewhere just the parent), init excluded. */
function ancestors() {
  const pids = [];
  let pid = process.ppid;
  while (pid > 1 && pids.length < 64) {
    pids.push(pid);
    try {
      // /proc/<pid>/stat: "pid (comm) state ppid …"; comm may hold spaces and parentheses.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      pid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      break;
    }
  }
  return pids;
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM'; // someone else's process, still there
  }
}

const files = exampleFiles();
let closeBackends;
try {
  await checkFree();
  closeBackends = await startBackends();
} catch (err) {
  files.cleanup();
  const taken = err.code === 'EADDRINUSE' ? ' (is another copy of the example running?)' : '';
  console.error(
    `cannot start the example on ${SERVICE_IP} (backends ${BACKENDS.join(', ')}): ${err.message}${taken}`,
  );
  console.error(HOW_TO_MOVE);
  process.exit(1);
}

// The built daemon; USERSPACE_PROXY_FROM_SOURCE=1 runs it from TypeScript instead (the tests do).
const daemonArgs =
  process.env.USERSPACE_PROXY_FROM_SOURCE === '1'
    ? [
        '--conditions=@userspace-proxy/source',
        '--import',
        'tsx',
        here('../../packages/server/src/main.ts'),
      ]
    : [here('../../packages/server/dist/main.js')];
// In its own process group, so that Ctrl-C reaches it once, through stop() below, and not also from
// the terminal: the daemon takes a second signal as "stop draining now".
const daemon = spawn(
  process.execPath,
  [...daemonArgs, '--config', files.config, '--exit-with-parent'],
  { cwd: root, stdio: ['ignore', 'inherit', 'inherit'], detached: true },
);
process.on('exit', () => {
  if (daemon.exitCode === null && daemon.signalCode === null) daemon.kill('SIGKILL');
  files.cleanup();
});

// One Ctrl-C can arrive twice: from the terminal and forwarded by pnpm, which runs this script. A
// signal within a second of the last one passed on is taken as the same one; a later one (a second
// Ctrl-C) is passed on too, and ends the drain at once.
let stopping = false;
let lastForwarded = 0;
const stop = (signal) => {
  stopping = true;
  if (daemon.exitCode !== null || daemon.signalCode !== null) return;
  if (Date.now() - lastForwarded < 1000) {
    console.error(`${signal} again within a second: taken as the same one, not passed on`);
    return;
  }
  lastForwarded = Date.now();
  daemon.kill(signal);
};
process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGTERM', () => stop('SIGTERM'));
process.on('SIGHUP', () => stop('SIGTERM')); // the terminal went away: stop as on SIGTERM

// If the command that started this script dies without passing a signal on (npx exits at once on
// SIGTERM, leaving pnpm and this script behind), stop as on SIGTERM.
const above = ancestors();
const watch = setInterval(() => {
  const gone = above.find((pid) => !alive(pid));
  if (gone === undefined && process.ppid === above[0]) return;
  clearInterval(watch);
  console.error(
    `the command that started the example (pid ${gone ?? above[0]}) exited; stopping the daemon`,
  );
  stop('SIGTERM');
}, 1000);
watch.unref();

const exited = new Promise((resolve) =>
  daemon.on('exit', (code, signal) => resolve({ code, signal })),
);

const deadline = Date.now() + 60_000;
let ready = false;
while (!ready && !stopping && daemon.exitCode === null && Date.now() < deadline) {
  ready = await reachable();
  if (!ready) await new Promise((resolve) => setTimeout(resolve, 100));
}
if (ready && !stopping) {
  const udp = `node -e "const s=require('dgram').createSocket('udp4');s.on('message',(m)=>{console.log(String(m));s.close()});s.send('hello',5300,'${SERVICE_IP}')"`;
  console.log(`
userspace-proxy is running the example in examples/standalone (daemon pid ${daemon.pid}). Try:

  curl http://${SERVICE_IP}:8080/                  # TCP, round robin over two backends
  curl http://${SERVICE_IP}:10256/healthz          # health (kube-proxy's format)
  curl http://${SERVICE_IP}:10249/metrics          # Prometheus metrics
  ${udp}
                                                  # UDP echo (plain Node.js: no nc needed)

Edit ${files.services} to change the Service live. Press Ctrl-C to stop.
`);
} else if (!ready && !stopping && daemon.exitCode === null) {
  console.error('the daemon did not start serving within 60 s; stopping');
  stop('SIGTERM');
}

const { code, signal } = await exited;
clearInterval(watch);
await closeBackends();
if (signal) {
  console.log(`the daemon was killed by ${signal}.`);
  process.exit(128 + (constants.signals[signal] ?? 0));
}
console.log(code === 0 ? 'stopped.' : `the daemon exited with code ${code}.`);
process.exit(code);
