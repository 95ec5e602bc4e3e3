import { afterEach, describe, expect, it } from 'vitest';
import { runStatusCommand } from './status-cli.js';
import type { StatusModel } from './status-model.js';
import { STATUS_PAGE_CSP } from './status-page.js';
import { Client } from './test-support/backends.js';
import { loopbackBlock } from './test-support/loopback.js';
import {
  type StatusDaemon,
  startStatusDaemon,
  statusService,
} from './test-support/status-daemon.js';
import { until } from './test-support/wait.js';

// Loopback addresses of this file: two Services, their endpoint, the daemon's servers.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const WEB = `${NET}1`;
const API = `${NET}2`;
const ENDPOINT = `${NET}3`;
const SERVERS = `${NET}4`;
const HOSTILE = '<img src=x onerror="alert(1)">\u001b[31m';

let running: StatusDaemon | undefined;
afterEach(async () => {
  await running?.close();
  running = undefined;
});

async function model(d: StatusDaemon): Promise<StatusModel> {
  return (await (await fetch(`http://${d.metrics}/status.json`)).json()) as StatusModel;
}

async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runStatusCommand(args, {
    stdout: (t) => {
      out += t;
    },
    stderr: (t) => {
      err += t;
    },
  });
  return { code, out, err };
}

describe('status', () => {
  it('serves the model, the page and the CLI table from a running daemon', async () => {
    const d = await startStatusDaemon({
      endpoint: ENDPOINT,
      serversIP: SERVERS,
      services: (b) => [
        statusService(b, { name: 'web', clusterIP: WEB, endpoint: ENDPOINT, description: HOSTILE }),
      ],
    });
    running = d;
    await until(async () => (await model(d)).servicePorts[0]?.portals.length === 1, 'the portal');
    const client = new Client(WEB, 8080);
    try {
      await client.roundTrip('hi', 'A:hi');
      await until(
        async () => (await model(d)).servicePorts[0]?.connectionsActive === 1,
        'the live connection',
      );
      const m = await model(d);
      expect(m.proxyMode).toBe('service-port-portal');
      expect(m.sync.lastTimestampSeconds).toBeGreaterThan(0);
      expect(m.sync.lastDurationSeconds).toBeGreaterThanOrEqual(0);
      const web = m.servicePorts[0];
      expect(web).toMatchObject({
        namespace: 'default',
        name: 'web',
        port: 'tcp',
        key: 'default/web:tcp',
        protocol: 'TCP',
        servicePort: 8080,
        portals: [{ ip: WEB, port: 8080, nodePort: 0, external: false }],
        endpoints: [`${ENDPOINT}:${d.backends.port}`],
        ejected: [],
        connectionsActive: 1,
        heldConnections: null,
      });
      // Bounded and escaped like a log line: the control character is gone, the markup is text.
      expect(web?.description).toContain('<img src=x onerror=');
      expect(web?.description).not.toContain('\u001b');

      const table = await cli(['--metrics-address', d.metrics]);
      expect(table.code).toBe(0);
      expect(table.out).toMatch(/SERVICE PORT\s+PROTO\s+PORTALS\s+ENDPOINTS/);
      expect(table.out).toMatch(new RegExp(`default/web:tcp\\s+TCP/8080\\s+${WEB}:8080\\s+`));
      const json = await cli(['--json', '--metrics-address', d.metrics]);
      expect(json.code).toBe(0);
      expect(JSON.parse(json.out).servicePorts[0].key).toBe('default/web:tcp');
    } finally {
      client.socket.destroy();
    }
    await until(async () => (await model(d)).servicePorts[0]?.connectionsActive === 0, 'the close');
    expect((await model(d)).servicePorts[0]?.bytesOut).toBeGreaterThanOrEqual(4);

    await d.write([
      statusService(d.backends, { name: 'web', clusterIP: WEB, endpoint: ENDPOINT }),
      statusService(d.backends, { name: 'api', clusterIP: API, endpoint: `${NET}9` }),
    ]);
    await until(async () => (await model(d)).servicePorts.length === 2, 'the added Service');
    expect((await model(d)).servicePorts.map((p) => p.key)).toEqual([
      'default/api:tcp',
      'default/web:tcp',
    ]);

    const page = await fetch(`http://${d.metrics}/status`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('content-security-policy')).toBe(STATUS_PAGE_CSP);
    const html = await page.text();
    expect(html).toContain("fetch('/status.json'");
    expect(html).not.toMatch(/innerHTML|<link|src=|https?:\/\//);
  });

  it('records refusals by reason and as recent errors', async () => {
    const d = await startStatusDaemon({
      endpoint: ENDPOINT,
      serversIP: SERVERS,
      // an endpoint nobody listens on: every dial fails
      services: (b) => [statusService(b, { name: 'web', clusterIP: WEB, endpoint: `${NET}8` })],
    });
    running = d;
    await until(async () => (await model(d)).servicePorts[0]?.portals.length === 1, 'the portal');
    const client = new Client(WEB, 8080);
    await until(() => client.closed, 'the refusal');
    await until(
      async () => (await model(d)).servicePorts[0]?.refused['dial-failed'] === 1,
      'the refusal count',
    );
    const m = await model(d);
    expect(m.recentErrors.map((e) => e.kind)).toContain('refused');
    expect(m.recentErrors.map((e) => e.kind)).toContain('dial-error');
    const table = await cli(['--metrics-address', d.metrics]);
    expect(table.out).toContain('dial-failed=1');
    expect(table.out).toContain('RECENT ERRORS');
  });

  it('says clearly when no daemon answers', async () => {
    const r = await cli(['--metrics-address', '127.1.131.7:9']);
    expect(r.code).toBe(1);
    expect(r.err).toContain('cannot reach the daemon at http://127.1.131.7:9/status.json');
    expect((await cli(['--help'])).out).toContain('--metrics-address');
    expect((await cli(['--bogus'])).code).toBe(1);
  });
});
