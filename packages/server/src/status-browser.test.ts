import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from './test-support/backends.js';
import { loopbackBlock } from './test-support/loopback.js';
import { pngLuminanceDeviation } from './test-support/png.js';
import {
  type StatusDaemon,
  startStatusDaemon,
  statusService,
} from './test-support/status-daemon.js';

// The status page in a real browser: Debian's chromium (installed by .ci/run), driven by
// playwright-core, which never downloads a browser of its own here. Set STATUS_SCREENSHOT to a path
// (docs/status-page.png) to keep the screenshot.
const CHROMIUM = '/usr/bin/chromium';
const missing = existsSync(CHROMIUM)
  ? ''
  : ` (skipped: ${CHROMIUM} is missing; apt-get install chromium)`;

// Loopback addresses of this file: two Services, their endpoint, the daemon's servers.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const WEB = `${NET}1`;
const API = `${NET}2`;
const ENDPOINT = `${NET}3`;
const SERVERS = `${NET}4`;
const HOSTILE = '<img src=x onerror="window.pwned=1">';

describe.skipIf(missing !== '')(`the status page in chromium${missing}`, () => {
  let d: StatusDaemon;
  let profile: string;
  let context: BrowserContext;
  let page: Page;

  beforeAll(async () => {
    d = await startStatusDaemon({
      endpoint: ENDPOINT,
      serversIP: SERVERS,
      services: (b) => [
        statusService(b, { name: 'web', clusterIP: WEB, endpoint: ENDPOINT, description: HOSTILE }),
      ],
    });
    profile = await mkdtemp(join(tmpdir(), 'up-chromium-'));
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
      viewport: { width: 1400, height: 520 },
      timeout: 60_000,
    });
    page = context.pages()[0] ?? (await context.newPage());
  }, 90_000);

  afterAll(async () => {
    await context?.close();
    await d?.close();
    if (profile) await rm(profile, { recursive: true, force: true });
  });

  const row = (key: string) => page.locator(`tr[data-key="${key}"]`);

  it('renders, follows a Service added while open, counts a live connection, shows input as text', async () => {
    const errors: string[] = [];
    page.on('pageerror', (err) => errors.push(err.message));
    await page.goto(`http://${d.metrics}/status`);
    await expect.poll(() => page.title()).toBe('userspace-proxy status');
    await row('default/web:tcp/TCP').waitFor({ timeout: 15_000 });
    // The hostile description is text: shown literally, no element made, no handler run.
    await expect
      .poll(() => row('default/web:tcp/TCP').locator('.desc').textContent())
      .toBe(HOSTILE);
    expect(await page.locator('img').count()).toBe(0);
    expect(await page.evaluate('typeof window.pwned')).toBe('undefined');

    // No reload from here on: a marker on the window must survive every refresh.
    await page.evaluate('window.marker = 42');
    await d.write([
      statusService(d.backends, {
        name: 'web',
        clusterIP: WEB,
        endpoint: ENDPOINT,
        description: HOSTILE,
      }),
      statusService(d.backends, { name: 'api', clusterIP: API, endpoint: ENDPOINT }),
    ]);
    await row('default/api:tcp/TCP').waitFor({ timeout: 15_000 });

    const active = row('default/web:tcp/TCP').locator('td').nth(5);
    expect(await active.textContent()).toBe('0');
    const client = new Client(WEB, 8080);
    try {
      await client.roundTrip('hi', 'A:hi');
      await expect.poll(() => active.textContent(), { timeout: 15_000 }).toBe('1');

      await page.fill('#filter', 'api');
      await expect.poll(() => page.locator('#rows tr').count()).toBe(1);
      await row('default/api:tcp/TCP').waitFor();
      await page.fill('#filter', '');
      await expect.poll(() => page.locator('#rows tr').count()).toBe(2);

      const shot = await page.screenshot({ fullPage: true });
      const { width, height, deviation } = pngLuminanceDeviation(shot);
      expect(width).toBeGreaterThan(100);
      expect(height).toBeGreaterThan(100);
      expect(deviation).toBeGreaterThan(10); // a blank page is a single colour: 0
      const keep = process.env.STATUS_SCREENSHOT;
      if (keep) await writeFile(keep, shot);
    } finally {
      client.socket.destroy();
    }
    expect(await page.evaluate('window.marker')).toBe(42);
    expect(errors).toEqual([]);
  }, 90_000);

  it('lists the workers in a table of their own, and hides it for one process', async () => {
    await page.goto(`http://${d.metrics}/status`);
    await row('default/web:tcp/TCP').waitFor({ timeout: 15_000 });
    expect(await page.locator('#workers-section').isHidden()).toBe(true); // one process: no workers
    // The model a primary serves with --workers 2 (workers.test.ts checks the daemon's side).
    await page.route('**/status.json', async (route) => {
      const response = await route.fetch();
      const model = {
        ...(await response.json()),
        workers: [
          { worker: 1, pid: 4101, connectionsActive: 3, connectionsTotal: 17 },
          { worker: 2, pid: 4102, connectionsActive: 0, connectionsTotal: 9 },
        ],
      };
      await route.fulfill({ response, json: model });
    });
    try {
      await page.locator('#workers-section').waitFor({ state: 'visible', timeout: 15_000 });
      const cells = (n: number) => page.locator(`tr[data-worker="${n}"] td`).allTextContents();
      expect(await cells(1)).toEqual(['1', '4101', '3', '17']);
      expect(await cells(2)).toEqual(['2', '4102', '0', '9']);
      expect(await page.locator('#sync').textContent()).not.toContain('workers');
    } finally {
      await page.unroute('**/status.json');
    }
    await page.locator('#workers-section').waitFor({ state: 'hidden', timeout: 15_000 });
  }, 60_000);
});
