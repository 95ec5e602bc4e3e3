import { spawn } from 'node:child_process';
import { Socket } from 'node:net';
import { sleep, startDaemon } from './daemon.js';
import { echoBackends, manifest, quantile, roundTrip, subnet } from './net.js';
import type { Probe } from './types.js';

/**
 * A listener that never accepts, with a backlog of 0 (python3: Node always accepts). Once its one
 * queue slot is taken the kernel drops further SYNs, so a dial to it times out: a blackholed
 * endpoint on loopback, without root or firewall rules.
 */
async function blackhole(ip: string, port: number) {
  const py = [
    'import socket,sys',
    's=socket.socket()',
    's.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)',
    `s.bind(("${ip}",${port}))`,
    's.listen(0)',
    'print("ready",flush=True)',
    'sys.stdin.read()',
  ].join('\n');
  const child = spawn('python3', ['-c', py], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (c) => reject(new Error(`python3 exited ${c}`)));
    child.stdout.once('data', () => resolve());
  });
  // Take the queue slots so every later SYN is dropped.
  const fillers: Socket[] = [];
  for (let i = 0; i < 3; i++) {
    const s = new Socket();
    s.on('error', () => {});
    s.connect(port, ip);
    fillers.push(s);
    await sleep(50);
  }
  const check = await roundTrip(ip, port, 'x', 600);
  return {
    dropsSyns: 'error' in check && check.error === 'TIMEOUT',
    stop() {
      for (const s of fillers) s.destroy();
      child.stdin.end();
      child.kill('SIGKILL');
    },
  };
}

/**
 * A blackholed endpoint among good ones: one-at-a-time clients of a Service with two good endpoints
 * and one whose SYNs are dropped, interleaved with clients of the same two good endpoints alone.
 * After the first few failures outlier ejection must keep the dead endpoint out of the way, so the
 * p99 of the first Service's clients is no more than 5 ms above the second's.
 */
export const blackholeProbe: Probe = async (ctx) => {
  const { clients } = ctx.sizes.blackhole;
  const warmup = 20;
  const net = subnet();
  const backends = await echoBackends([`${net}10`, `${net}11`]);
  const hole = await blackhole(`${net}12`, backends.port);
  const good = [`${net}10`, `${net}11`];
  const daemon = await startDaemon({
    net,
    build: ctx.build,
    services: manifest([
      { name: 'base', ip: `${net}1`, port: 8080, targetPort: backends.port, endpoints: good },
      {
        name: 'holed',
        ip: `${net}3`,
        port: 8080,
        targetPort: backends.port,
        endpoints: [...good, `${net}12`],
      },
    ]),
  });
  try {
    const base: number[] = [];
    const holed: number[] = [];
    let errors = 0;
    for (let i = 0; i < clients; i++) {
      for (const [ip, out] of [
        [`${net}1`, base],
        [`${net}3`, holed],
      ] as const) {
        const r = await roundTrip(ip, 8080, 'hi\n', 10_000);
        if ('ms' in r) out.push(r.ms);
        else errors++;
      }
    }
    const after = holed.slice(warmup);
    const p99Base = quantile(base.slice(warmup), 0.99);
    const p99Holed = quantile(after, 0.99);
    const added = p99Holed - p99Base;
    const slow = after.filter((ms) => ms > 100).length;
    const m = await daemon.metrics();
    const dialFailures = m.get('userspace_proxy_dial_failures_total') ?? 0;
    return {
      id: 'blackhole',
      title: 'A blackholed endpoint among good ones',
      done:
        `Two Services on the same two good endpoints, one of them with a third endpoint whose SYNs ` +
        `are dropped (a listener with a full backlog). ${clients} one-at-a-time clients each ` +
        `(connect, send, first byte back), alternating between the two Services; the first ` +
        `${warmup} of each are left out ("after the first few failures"). Default dial timeouts ` +
        `(250 ms first) and outlier ejection.`,
      figures: [
        {
          name: 'the third endpoint really drops SYNs',
          value: hole.dropsSyns ? 'yes' : 'no',
          goal: 'yes',
          pass: hole.dropsSyns,
        },
        {
          name: 'p99 with the blackholed endpoint / without',
          value: `${p99Holed.toFixed(2)} ms / ${p99Base.toFixed(2)} ms`,
          goal: '—',
        },
        {
          name: 'p99 added by the blackholed endpoint',
          value: `${added.toFixed(2)} ms`,
          goal: '< 5 ms',
          pass: added < 5,
        },
        {
          name: 'clients over 100 ms after the warm-up (max)',
          value: `${slow} of ${after.length} (${Math.max(...after).toFixed(0)} ms)`,
          goal: '—',
        },
        { name: 'dial failures counted', value: String(dialFailures), goal: '—' },
        { name: 'clients that failed', value: String(errors), goal: '0', pass: errors === 0 },
      ],
      notes: [],
    };
  } finally {
    await daemon.stop('SIGKILL');
    hole.stop();
    await backends.close();
  }
};
