import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createHealthServer, type HealthServerOptions } from './health-server.js';
import { ProxierHealth } from './healthz-state.js';

let server: Server | undefined;

afterEach(async () => {
  await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  server = undefined;
});

async function start(options: HealthServerOptions): Promise<string> {
  server = createHealthServer(options);
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function clock() {
  let now = Date.UTC(2024, 0, 1);
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

describe('health server', () => {
  it('answers /healthz and /livez 200 with JSON bodies and counts them', async () => {
    const codes: string[] = [];
    const health = new ProxierHealth({ healthTimeoutMs: 1000, clock: clock() });
    const base = await start({
      health,
      observer: {
        healthzResponse: (c) => codes.push(`healthz ${c}`),
        livezResponse: (c) => codes.push(`livez ${c}`),
      },
    });
    const healthz = await fetch(`${base}/healthz`);
    expect(healthz.status).toBe(200);
    expect(healthz.headers.get('content-type')).toBe('application/json');
    expect(healthz.headers.get('x-content-type-options')).toBe('nosniff');
    expect(await healthz.text()).toMatch(
      /^\{"lastUpdated": "[^"]+","currentTime": "[^"]+", "nodeEligible": true\}$/,
    );
    const livez = await fetch(`${base}/livez`, { method: 'POST' });
    expect(livez.status).toBe(200);
    expect(await livez.text()).not.toContain('nodeEligible');
    expect(codes).toEqual(['healthz 200', 'livez 200']);
  });

  it('answers 503 on both once an update is stuck', async () => {
    const c = clock();
    const health = new ProxierHealth({ healthTimeoutMs: 1000, clock: c });
    health.updated();
    health.queuedUpdate();
    c.advance(1000);
    const base = await start({ health });
    expect((await fetch(`${base}/healthz`)).status).toBe(503);
    expect((await fetch(`${base}/livez`)).status).toBe(503);
  });

  it('fails only /healthz when the node is ineligible or the daemon drains', async () => {
    const health = new ProxierHealth({ healthTimeoutMs: 1000, clock: clock() });
    let eligible = false;
    let draining = false;
    const base = await start({ health, nodeEligible: () => eligible, draining: () => draining });
    const ineligible = await fetch(`${base}/healthz`);
    expect(ineligible.status).toBe(503);
    expect(await ineligible.text()).toContain('"nodeEligible": false');
    expect((await fetch(`${base}/livez`)).status).toBe(200);
    eligible = true;
    draining = true;
    expect((await fetch(`${base}/healthz`)).status).toBe(503);
    expect((await fetch(`${base}/livez`)).status).toBe(200);
  });

  it('answers 404 elsewhere, as Go’s mux does', async () => {
    const base = await start({ health: new ProxierHealth({ healthTimeoutMs: 1000 }) });
    const res = await fetch(`${base}/metrics`);
    expect(res.status).toBe(404);
    expect(await res.text()).toBe('404 page not found\n');
  });

  it('survives a throwing eligibility hook', async () => {
    const base = await start({
      health: new ProxierHealth({ healthTimeoutMs: 1000 }),
      nodeEligible: () => {
        throw new Error('boom');
      },
    });
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
  });
});
