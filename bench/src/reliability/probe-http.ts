import { randomBytes } from 'node:crypto';
import { Socket } from 'node:net';
import { httpGet, sleep, startDaemon, until } from './daemon.js';
import { echoBackends, manifest, roundTrip, subnet } from './net.js';
import type { Figure, Probe } from './types.js';

interface Conn {
  socket: Socket;
  openedAt: number;
  closedAt?: number;
  answer: string;
}

function open(host: string, port: number, onConnect?: (s: Socket) => void): Conn {
  const c: Conn = { socket: new Socket(), openedAt: performance.now(), answer: '' };
  c.socket.on('data', (d) => {
    if (c.answer.length < 200) c.answer += d.toString('latin1');
  });
  c.socket.on('error', () => {});
  c.socket.on('close', () => {
    c.closedAt ??= performance.now();
  });
  c.socket.connect(port, host, () => onConnect?.(c.socket));
  return c;
}

/** Seconds each connection was held open; the ones closed within 100 ms count as closed on arrival. */
function lifetimes(conns: Conn[]) {
  const held = conns.filter((c) => c.closedAt === undefined || c.closedAt - c.openedAt > 100);
  const closed = held.filter((c) => c.closedAt !== undefined);
  const secs = closed.map((c) => ((c.closedAt as number) - c.openedAt) / 1000);
  return {
    onArrival: conns.length - held.length,
    held: held.length,
    stillOpen: held.length - closed.length,
    max: secs.length ? Math.max(...secs) : 0,
  };
}

/**
 * Abuse of the health and metrics ports: idle connections past the cap, garbage requests, and
 * slowloris clients that trickle header bytes. The proxy and both servers must go on answering,
 * and the header timeout must be what the documentation says (10 s).
 */
export const httpProbe: Probe = async (ctx) => {
  const { idle, slow, garbage, slowMs } = ctx.sizes.http;
  const net = subnet();
  const backends = await echoBackends([`${net}10`]);
  const daemon = await startDaemon({
    net,
    build: ctx.build,
    services: manifest([
      {
        name: 'web',
        ip: `${net}1`,
        port: 8080,
        targetPort: backends.port,
        endpoints: [`${net}10`],
      },
    ]),
  });
  const hp = `${net}2`;
  const conns: Conn[] = [];
  try {
    // 1. Idle connections to the health server, many more than its cap.
    const idlers: Conn[] = [];
    for (let i = 0; i < idle; i++) idlers.push(open(hp, 10256));
    conns.push(...idlers);
    // Long enough for the daemon to have accepted (and closed, past the cap) every one of them: a
    // connection still in the kernel's accept queue looks established to its client.
    await sleep(3000);
    const idleNow = lifetimes(idlers);
    const idleOpen = idlers.filter((c) => c.closedAt === undefined).length;
    const proxied = await roundTrip(`${net}1`, 8080, 'x\n', 3000);
    const metricsWhileIdle = (await httpGet(daemon.metricsUrl, 5000)).status;
    // 2. Garbage to both servers: random bytes ending a request, and oversized headers.
    const answers = new Map<string, number>();
    const junk: Conn[] = [];
    for (let i = 0; i < garbage; i++) {
      const port = i % 2 === 0 ? 10249 : 10256;
      const body =
        i % 10 === 9
          ? Buffer.from(`GET /metrics HTTP/1.1\r\nX: ${'a'.repeat(100_000)}\r\n\r\n`)
          : Buffer.concat([randomBytes(1 + (i % 2000)), Buffer.from('\r\n\r\n')]);
      junk.push(open(hp, port, (s) => s.write(body)));
      if (i % 50 === 49) await sleep(50);
    }
    await until(() => junk.every((c) => c.closedAt !== undefined), 15_000);
    for (const c of junk) {
      const key = /^HTTP\/1\.[01] (\d{3})/.exec(c.answer)?.[1] ?? (c.closedAt ? 'closed' : 'hung');
      answers.set(key, (answers.get(key) ?? 0) + 1);
    }
    conns.push(...junk);
    // 3. Slowloris on the metrics server: a header byte a second, never the end of the headers.
    const slowConns: Conn[] = [];
    const drip: ReturnType<typeof setInterval>[] = [];
    for (let i = 0; i < slow; i++) {
      slowConns.push(
        open(hp, 10249, (s) => {
          s.write('GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ');
          drip.push(setInterval(() => s.writable && s.write('a'), 1000));
        }),
      );
    }
    conns.push(...slowConns);
    if (slowMs > 0) {
      await until(() => [...idlers, ...slowConns].every((c) => c.closedAt !== undefined), slowMs);
    }
    for (const t of drip) clearInterval(t);
    const idleEnd = lifetimes(idlers);
    const slowEnd = lifetimes(slowConns);
    // Whatever is still held (a size that does not wait for the timeouts) goes before the checks.
    for (const c of [...idlers, ...slowConns]) c.socket.destroy();
    await sleep(300);
    const healthAfter = (await httpGet(`${daemon.healthz}/healthz`, 5000)).status;
    const metricsAfter = (await httpGet(daemon.metricsUrl, 5000)).status;
    const proxiedAfter = await roundTrip(`${net}1`, 8080, 'y\n', 3000);
    const m = await daemon.metrics();
    const refusedHttp = m.get('userspace_proxy_http_connections_refused_total') ?? 0;
    const figures: Figure[] = [
      {
        name: 'idle health connections open 3 s after they were opened',
        value: `${idleOpen} of ${idle} (${idleNow.onArrival} closed within 100 ms)`,
        goal: '≤ 64 (the cap)',
        pass: idleOpen <= 64,
      },
      {
        name: 'proxying and /metrics while the health server was flooded',
        value: `${'ms' in proxied ? 'served' : proxied.error}; ${metricsWhileIdle}`,
        goal: 'served; 200',
        pass: 'ms' in proxied && metricsWhileIdle === 200,
      },
      {
        name: 'answers to garbage requests',
        value: [...answers].map(([k, v]) => `${k}: ${v}`).join(', '),
        goal: 'none hung',
        pass: !answers.has('hung'),
      },
    ];
    if (slowMs > 0) {
      figures.push(
        {
          name: 'slowloris connections: held, longest held open, still open',
          value: `${slowEnd.held}; ${slowEnd.max.toFixed(1)} s; ${slowEnd.stillOpen}`,
          goal: '≤ 11 s (10 s header timeout, checked every second); 0',
          pass: slowEnd.stillOpen === 0 && slowEnd.max <= 11.5,
        },
        {
          name: 'silent connections: longest held open, still open',
          value: `${idleEnd.max.toFixed(1)} s; ${idleEnd.stillOpen}`,
          goal: '≤ 11 s; 0',
          pass: idleEnd.stillOpen === 0 && idleEnd.max <= 11.5,
        },
      );
    }
    figures.push(
      {
        name: 'after: /healthz, /metrics, proxying, daemon running',
        value: `${healthAfter}, ${metricsAfter}, ${'ms' in proxiedAfter ? 'served' : proxiedAfter.error}, ${daemon.alive() ? 'yes' : 'no'}`,
        goal: '200, 200, served, yes',
        pass: healthAfter === 200 && metricsAfter === 200 && 'ms' in proxiedAfter && daemon.alive(),
      },
      { name: 'HTTP connections refused (counted)', value: String(refusedHttp), goal: '—' },
    );
    return {
      id: 'http',
      title: 'Garbage and slow HTTP on the health and metrics ports',
      done:
        `${idle} idle connections to the health server; ${garbage} garbage requests (random bytes, ` +
        `every tenth a 100 KB header) alternating between the metrics and health servers; ` +
        `${slow} slowloris clients on the metrics server sending one header byte a second` +
        `${slowMs > 0 ? `, watched for ${slowMs / 1000} s` : ' (not run at this size)'}.`,
      figures,
      notes: [],
    };
  } finally {
    for (const c of conns) c.socket.destroy();
    await daemon.stop('SIGKILL');
    await backends.close();
  }
};
