import { spawn } from 'node:child_process';
import dgram from 'node:dgram';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { resolveConfiguration } from './config-load.js';
import { parseManifest } from './manifest-parse.js';
import { ask, Client } from './test-support/backends.js';
import { REPO_ROOT } from './test-support/daemon-process.js';
import { until } from './test-support/wait.js';

// The example `npx -y pnpm@12.4.2 start` runs (examples/standalone): its files are valid, and the
// start script serves, answers on TCP and UDP, and stops cleanly on Ctrl-C (SIGINT).
const EXAMPLE = fileURLToPath(new URL('../../../examples/standalone/', import.meta.url));

function udpAsk(host: string, port: number, text: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket('udp4');
    const timer = setTimeout(() => {
      socket.close();
      resolve('TIMEOUT');
    }, 2000);
    socket.on('message', (msg) => {
      clearTimeout(timer);
      socket.close();
      resolve(msg.toString());
    });
    socket.send(text, port, host);
  });
}

describe('examples/standalone', () => {
  it('has a valid configuration and manifest', async () => {
    const resolved = await resolveConfiguration({
      configFile: `${EXAMPLE}config.yaml`,
      flags: {},
      explicit: new Set(),
      configFlags: new Set(),
    });
    expect(resolved.errors).toEqual([]);
    expect(resolved.warnings).toEqual([]);
    const manifest = parseManifest(await readFile(`${EXAMPLE}services.yaml`, 'utf8'));
    expect(manifest).toMatchObject({ ok: true, warnings: [] });
  });

  it('starts, prints where to connect, serves TCP and UDP, and stops cleanly on SIGINT', async () => {
    const child = spawn(process.execPath, [`${EXAMPLE}start.mjs`], {
      cwd: REPO_ROOT,
      env: { ...process.env, USERSPACE_PROXY_FROM_SOURCE: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
    });
    child.stderr.on('data', (c: Buffer) => {
      out += c.toString();
    });
    const exited = new Promise<number | null>((resolve) =>
      child.on('exit', (code) => resolve(code)),
    );
    try {
      await until(() => out.includes('Press Ctrl-C to stop.'), 'the banner', 60_000);
      expect(out).toContain('curl http://127.10.0.1:8080/');
      const answers = new Set<string>();
      await until(async () => {
        const answer = await ask('127.10.0.1', 8080, 'GET / HTTP/1.0\r\n\r\n');
        answers.add(/backend (127\.10\.0\.\d)/.exec(answer)?.[1] ?? answer);
        return answers.size >= 2;
      }, 'both backends');
      expect([...answers].sort()).toEqual(['127.10.0.2', '127.10.0.3']);
      expect(await udpAsk('127.10.0.1', 5300, 'hi')).toMatch(/^backend 127\.10\.0\.\d: hi$/);
      child.kill('SIGINT');
      expect(await exited).toBe(0);
      expect(out).toContain('stopped.');
      expect(await ask('127.10.0.1', 8080, 'x', 1000)).toBe('ECONNREFUSED');
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });

  it('drains on Ctrl-C even when the signal arrives twice (terminal and pnpm), and exits 0', async () => {
    // detached: the script leads its own process group, as a terminal's foreground job does.
    const child = spawn(process.execPath, [`${EXAMPLE}start.mjs`], {
      cwd: REPO_ROOT,
      env: { ...process.env, USERSPACE_PROXY_FROM_SOURCE: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
    });
    child.stderr.on('data', (c: Buffer) => {
      out += c.toString();
    });
    const exited = new Promise<number | null>((resolve) =>
      child.on('exit', (code) => resolve(code)),
    );
    let held: Client | undefined;
    try {
      await until(() => out.includes('Press Ctrl-C to stop.'), 'the banner', 60_000);
      held = new Client('127.10.0.1', 8080);
      held.socket.write('GET /held HTTP/1.1\r\nHost: example\r\n'); // the request is not over yet
      await until(async () => {
        const text = await (await fetch('http://127.10.0.1:10249/metrics')).text();
        return /userspace_proxy_connections_active\{[^}]*protocol="TCP"[^}]*\} 1/.test(text);
      }, 'the held connection to be proxied');
      process.kill(-(child.pid as number), 'SIGINT'); // Ctrl-C: the whole foreground group
      await until(() => out.includes('waiting up to 5000 ms for 1 connection(s)'), 'the drain');
      child.kill('SIGINT'); // pnpm relays the same Ctrl-C to its script
      await new Promise((resolve) => setTimeout(resolve, 300)); // time for a wrongly passed-on one
      await held.roundTrip('\r\n', 'hello from backend'); // the drain lets it finish
      expect(await exited).toBe(0);
      expect(out).not.toContain('not waiting for connections any longer');
      expect(out).toContain('stopped.');
    } finally {
      held?.socket.destroy();
      if (child.exitCode === null) process.kill(-(child.pid as number), 'SIGKILL');
    }
  });
});
