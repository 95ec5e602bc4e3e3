// `npx -y pnpm@12.4.2 start` (after the build): runs two small backends and the userspace-proxy daemon
// in front of them, prints where to connect, and stops everything on Ctrl-C. Plain Node.js.
import { spawn } from 'node:child_process';
import dgram from 'node:dgram';
import http from 'node:http';
import net from 'node:net';
import { fileURLToPath } from 'node:url';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));
const root = here('../../');
const SERVICE_IP = '127.10.0.1';
const BACKENDS = ['127.10.0.2', '127.10.0.3'];

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
    const echo = dgram.createSocket('udp4');
    echo.on('message', (msg, rinfo) =>
      echo.send(`backend ${ip}: ${msg}`, rinfo.port, rinfo.address),
    );
    await new Promise((resolve, reject) => echo.once('error', reject).bind(5300, ip, resolve));
    closers.push(
      () =>
        new Promise((resolve) => {
          web.close(resolve);
          web.closeAllConnections();
        }),
      () => new Promise((resolve) => echo.close(resolve)),
    );
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

let closeBackends;
try {
  closeBackends = await startBackends();
} catch (err) {
  console.error(`cannot start the example backends on ${BACKENDS.join(', ')}: ${err.message}`);
  console.error('(is another copy of the example running?)');
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
const daemon = spawn(process.execPath, [...daemonArgs, '--config', here('config.yaml')], {
  cwd: root,
  stdio: ['ignore', 'inherit', 'inherit'],
  detached: true,
});
process.on('exit', () => {
  if (daemon.exitCode === null && daemon.signalCode === null) daemon.kill('SIGKILL');
});

// One Ctrl-C can arrive twice: from the terminal and forwarded by pnpm, which runs this script. A
// signal within a second of the last one passed on is taken as the same one; a later one (a second
// Ctrl-C) is passed on too, and ends the drain at once.
let stopping = false;
let lastForwarded = 0;
const stop = (signal) => {
  stopping = true;
  if (daemon.exitCode !== null || daemon.signalCode !== null) return;
  if (Date.now() - lastForwarded < 1000) return;
  lastForwarded = Date.now();
  daemon.kill(signal);
};
process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGTERM', () => stop('SIGTERM'));

const exited = new Promise((resolve) =>
  daemon.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0))),
);

const deadline = Date.now() + 60_000;
let ready = false;
while (!ready && !stopping && daemon.exitCode === null && Date.now() < deadline) {
  ready = await reachable();
  if (!ready) await new Promise((resolve) => setTimeout(resolve, 100));
}
if (ready && !stopping) {
  console.log(`
userspace-proxy is running the example in examples/standalone. Try:

  curl http://${SERVICE_IP}:8080/                  # TCP, round robin over two backends
  echo hello | nc -u -w1 ${SERVICE_IP} 5300        # UDP echo
  curl http://${SERVICE_IP}:10256/healthz          # health (kube-proxy's format)
  curl http://${SERVICE_IP}:10249/metrics          # Prometheus metrics

Edit examples/standalone/services.yaml to change the Service live. Press Ctrl-C to stop.
`);
} else if (!ready && !stopping && daemon.exitCode === null) {
  console.error('the daemon did not start serving within 60 s; stopping');
  stop('SIGTERM');
}

const code = await exited;
await closeBackends();
console.log(code === 0 ? 'stopped.' : `the daemon exited with code ${code}.`);
process.exit(code);
