import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ProcDescriptorBudget, parseSoftNoFileLimit } from './fd-budget.js';
import { createHealthServer } from './health-server.js';
import { ProxierHealth } from './healthz-state.js';
import {
  createLimitedServer,
  HTTP_HEADERS_TIMEOUT_MS,
  HTTP_MAX_CONNECTIONS,
  HTTP_MAX_CONNECTIONS_PER_CLIENT,
  HTTP_TIMEOUT_CHECK_MS,
  type HttpLimits,
  type HttpRefusal,
} from './http-guard.js';
import { ProxyMetrics } from './metrics.js';
import { createMetricsServer } from './metrics-server.js';
import { closedOnArrival, httpStatus as get } from './test-support/http-get.js';
import { loopbackBlock } from './test-support/loopback.js';
import { until } from './test-support/wait.js';

const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const HOST = `${NET}1`;
/** Two clients on addresses of their own. */
const CLIENT_A = `${NET}2`;
const CLIENT_B = `${NET}3`;
let server: Server | undefined;
const sockets: Socket[] = [];
/** Deadlines pushed far away, for tests that count idle connections however slow the machine. */
const FAR = { headersTimeoutMs: 600_000, idleTimeoutMs: 600_000 };

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  server = undefined;
});

async function start(
  limits: HttpLimits,
): Promise<{ port: number; refusals: HttpRefusal[]; clients: string[] }> {
  const refusals: HttpRefusal[] = [];
  const clients: string[] = [];
  server = createLimitedServer((_req, res) => res.end('ok'), {
    ...limits,
    onRefused: (r, client) => {
      refusals.push(r);
      clients.push(client);
    },
  });
  await new Promise<void>((resolve) => server?.listen(0, HOST, resolve));
  return { port: (server.address() as AddressInfo).port, refusals, clients };
}

/** A raw connection (from `localAddress` when given) that records when the server closed it. */
function connect(port: number, localAddress?: string) {
  const socket = new Socket();
  sockets.push(socket);
  const state = { closedAt: 0, received: '' };
  socket.on('data', (c) => {
    state.received += c.toString();
  });
  socket.on('close', () => {
    state.closedAt = Date.now();
  });
  socket.on('error', () => {});
  const connected = new Promise<void>((resolve) =>
    socket.connect({ port, host: HOST, ...(localAddress ? { localAddress } : {}) }, resolve),
  );
  return { socket, state, connected };
}

describe('the limits of the health and metrics servers', () => {
  it('have the documented defaults, and Node checks the header deadline every second', () => {
    const health = createHealthServer({ health: new ProxierHealth({ healthTimeoutMs: 1000 }) });
    const metrics = createMetricsServer({
      registry: new ProxyMetrics({ defaultMetrics: false }).registry,
      proxyMode: 'service-port-portal',
      configz: () => '{}',
    });
    for (const s of [health, metrics]) {
      expect(s.maxConnections).toBe(HTTP_MAX_CONNECTIONS);
      expect(s.headersTimeout).toBe(HTTP_HEADERS_TIMEOUT_MS);
      expect(s.timeout).toBe(10_000);
    }
    expect([
      HTTP_MAX_CONNECTIONS,
      HTTP_MAX_CONNECTIONS_PER_CLIENT,
      HTTP_HEADERS_TIMEOUT_MS,
      HTTP_TIMEOUT_CHECK_MS,
    ]).toEqual([64, 16, 3000, 1000]);
    expect(health.requestTimeout).toBe(3000);
    expect(metrics.requestTimeout).toBe(30_000);
  });

  it('cut a client that sends its headers byte by byte at the header deadline', async () => {
    // The deadline scaled down 10×: 1 s, checked every 100 ms (Node's default check, every 30 s,
    // let such a client go on for up to 30 s more).
    const { port } = await start({ headersTimeoutMs: 1000, timeoutCheckMs: 100 });
    const client = connect(port);
    await client.connected;
    const started = Date.now();
    const request = `GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ${'a'.repeat(1000)}`;
    let i = 0;
    const drip = setInterval(() => {
      if (!client.socket.destroyed) client.socket.write(request[i++ % request.length] as string);
    }, 20);
    try {
      await until(() => client.state.closedAt > 0, 'the server to cut the client', 10_000);
    } finally {
      clearInterval(drip);
    }
    const after = client.state.closedAt - started;
    expect(after).toBeGreaterThanOrEqual(900);
    expect(after).toBeLessThan(2500);
    expect(client.state.received).toMatch(/^HTTP\/1\.1 408/);
  });

  it('close a connection that sends nothing at the header deadline, with a 408', async () => {
    // The idle timeout is far away: what closes the connection is the header deadline, which Node
    // starts when it accepts the connection, first byte or not.
    const { port } = await start({
      headersTimeoutMs: 200,
      timeoutCheckMs: 50,
      idleTimeoutMs: 600_000,
    });
    const client = connect(port);
    await client.connected;
    await until(() => client.state.closedAt > 0, 'the silent connection to be closed', 10_000);
    expect(client.state.received).toMatch(/^HTTP\/1\.1 408/);
  });

  it('keep at most maxConnectionsPerClient per client address: another client is still served', async () => {
    // The global cap is 20 here, and one client opens 20 idle connections: without a cap per
    // client it held them all, and a probe from anywhere else was closed on arrival.
    const { port, refusals, clients } = await start({ maxConnections: 20, ...FAR });
    const idle = Array.from({ length: 20 }, () => connect(port, CLIENT_A));
    await Promise.all(idle.map((c) => c.connected));
    const over = 20 - HTTP_MAX_CONNECTIONS_PER_CLIENT;
    await until(() => idle.filter((c) => c.state.closedAt > 0).length === over, 'the ones over');
    expect(new Set(refusals)).toEqual(new Set(['client-limit']));
    expect(new Set(clients)).toEqual(new Set([CLIENT_A]));
    expect(refusals).toHaveLength(over);
    expect(await get(`http://${HOST}:${port}/`, 2000, CLIENT_B)).toBe(200);
    // The first client gets its connections back as its idle ones go.
    expect(closedOnArrival(await get(`http://${HOST}:${port}/`, 2000, CLIENT_A))).toBe(true);
    idle.find((c) => c.state.closedAt === 0)?.socket.destroy();
    await until(
      async () => (await get(`http://${HOST}:${port}/`, 2000, CLIENT_A)) === 200,
      'the first client served again',
    );
  });

  it('close a connection that sends nothing after the idle timeout', async () => {
    const { port } = await start({ idleTimeoutMs: 300 });
    const client = connect(port);
    await client.connected;
    const started = Date.now();
    await until(() => client.state.closedAt > 0, 'the idle connection to be closed', 10_000);
    expect(client.state.closedAt - started).toBeLessThan(2500);
  });

  it('keep at most maxConnections, closing and counting the others', async () => {
    const { port, refusals } = await start({ maxConnections: 4, ...FAR });
    const clients = Array.from({ length: 10 }, (_, i) => connect(port, `${NET}${10 + i}`));
    await Promise.all(clients.map((c) => c.connected));
    await until(() => refusals.length === 6, 'six refusals');
    await until(
      () => clients.filter((c) => c.state.closedAt > 0).length === 6,
      'six connections closed',
    );
    expect(new Set(refusals)).toEqual(new Set(['connection-limit']));
    // Once the four go, a new client is served again.
    const held = clients.filter((c) => c.state.closedAt === 0);
    expect(held).toHaveLength(4);
    expect(closedOnArrival(await get(`http://${HOST}:${port}/`))).toBe(true);
    for (const c of held) c.socket.destroy();
    await until(async () => (await get(`http://${HOST}:${port}/`)) === 200, 'a client served');
  });

  it('refuse connections when the descriptor budget has no room', async () => {
    let room = false;
    const { port, refusals } = await start({ descriptors: { hasRoom: () => room } });
    expect(closedOnArrival(await get(`http://${HOST}:${port}/`))).toBe(true);
    expect(refusals).toContain('descriptors');
    room = true;
    expect(await get(`http://${HOST}:${port}/`)).toBe(200);
  });
});

describe('ProcDescriptorBudget', () => {
  it('reads the soft limit of /proc/self/limits', () => {
    const limits = [
      'Limit                     Soft Limit           Hard Limit           Units',
      'Max processes             63459                63459                processes',
      'Max open files            1024                 524288               files',
    ].join('\n');
    expect(parseSoftNoFileLimit(limits)).toBe(1024);
    expect(parseSoftNoFileLimit('Max open files  unlimited  unlimited  files')).toBeUndefined();
    expect(parseSoftNoFileLimit('')).toBeUndefined();
  });

  it('has room until the open descriptors reach the limit less the reserve', async () => {
    let open = 800;
    let now = 0;
    const budget = new ProcDescriptorBudget({
      limit: () => 1024,
      reserve: 128,
      sampleMs: 1000,
      countOpen: async () => open,
      now: () => now,
    });
    await Promise.resolve(); // the first sample
    await Promise.resolve();
    const granted = Array.from({ length: 200 }, () => budget.hasRoom()).filter(Boolean).length;
    expect(granted).toBe(96); // 800 open + 96 granted = 1024 − 128
    open = 100;
    now = 1000; // the next sample is due: taken in the background
    budget.hasRoom();
    await Promise.resolve();
    await Promise.resolve();
    expect(budget.hasRoom()).toBe(true);
  });

  it('uses this process’s real limit on Linux, and always has room without one', () => {
    const real = new ProcDescriptorBudget();
    if (process.platform === 'linux') expect(real.limit).toBeGreaterThan(0);
    expect(new ProcDescriptorBudget({ limit: () => undefined }).hasRoom()).toBe(true);
    expect(new ProcDescriptorBudget({ limit: () => 1024, countOpen: async () => 0 }).reserve).toBe(
      128,
    );
    expect(new ProcDescriptorBudget({ limit: () => 256, countOpen: async () => 0 }).reserve).toBe(
      64,
    );
  });
});
