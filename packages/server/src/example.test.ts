import { spawn } from 'node:child_process';
import dgram from 'node:dgram';
import { readFileSync } from 'node:fs';
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
      await until(
        () => out.includes('SIGINT again within a second: taken as the same one'),
        'the echo',
      );
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

/** The start script, spawned as a test would run it; `ip` keeps parallel copies apart. */
function startExample(ip: string, options: { args?: string[]; via?: 'wrapper' } = {}) {
  const script = [`${EXAMPLE}start.mjs`, '--ip', ip, ...(options.args ?? [])];
  const env = { ...process.env, USERSPACE_PROXY_FROM_SOURCE: '1' };
  // "wrapper" plays npx: a parent that starts the script and can be killed without passing it on.
  const child =
    options.via === 'wrapper'
      ? spawn(
          process.execPath,
          [
            '-e',
            `require('node:child_process').spawn(process.execPath, ${JSON.stringify(script)}, { stdio: 'inherit' }); setInterval(() => {}, 1000);`,
          ],
          { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] },
        )
      : spawn(process.execPath, script, { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr?.on('data', (c: Buffer) => {
    out += c.toString();
  });
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, out: () => out, exited };
}

/** The pid the banner names for the daemon. */
function daemonPid(out: string): number {
  return Number(/daemon pid (\d+)/.exec(out)?.[1]);
}

/** The children of `pid` (Linux). */
function childrenOf(pid: number): number[] {
  const text = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
  return text === '' ? [] : text.split(' ').map(Number);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Kills whatever a test left running. */
function reap(...pids: (number | undefined)[]): void {
  for (const pid of pids)
    if (pid !== undefined && pid > 0 && alive(pid)) process.kill(pid, 'SIGKILL');
}

describe('examples/standalone on other addresses, and its lifetime', () => {
  it('takes other addresses, and says how when its own are taken', async () => {
    const first = startExample('127.10.5.1');
    let second: ReturnType<typeof startExample> | undefined;
    try {
      await until(() => first.out().includes('Press Ctrl-C to stop.'), 'the banner', 60_000);
      expect(first.out()).toContain('curl http://127.10.5.1:8080/');
      expect(await ask('127.10.5.1', 8080, 'GET / HTTP/1.0\r\n\r\n')).toMatch(
        /hello from backend 127\.10\.5\.[23]/,
      );
      second = startExample('127.10.5.1');
      expect((await second.exited).code).toBe(1);
      expect(second.out()).toContain('EADDRINUSE');
      expect(second.out()).toContain('USERSPACE_PROXY_EXAMPLE_IP=127.10.1.1');
      first.child.kill('SIGTERM');
      expect((await first.exited).code).toBe(0);
    } finally {
      reap(first.child.pid, second?.child.pid, daemonPid(first.out()));
    }
  });

  it('leaves no daemon behind when the start script is killed with SIGKILL', async () => {
    const run = startExample('127.10.6.1');
    let daemon: number | undefined;
    try {
      await until(() => run.out().includes('Press Ctrl-C to stop.'), 'the banner', 60_000);
      daemon = daemonPid(run.out());
      expect(childrenOf(run.child.pid as number)).toContain(daemon);
      run.child.kill('SIGKILL');
      await until(
        async () => (await ask('127.10.6.1', 8080, 'x', 1000)) === 'ECONNREFUSED',
        'the listener to close',
        15_000,
      );
      await until(() => !alive(daemon as number), 'the daemon to exit', 15_000);
    } finally {
      reap(run.child.pid, daemon);
    }
  });

  it('stops, with the daemon, when the command that started it dies (npx killed by a signal)', async () => {
    const run = startExample('127.10.7.1', { via: 'wrapper' });
    let script: number | undefined;
    let daemon: number | undefined;
    try {
      await until(() => run.out().includes('Press Ctrl-C to stop.'), 'the banner', 60_000);
      daemon = daemonPid(run.out());
      script = childrenOf(run.child.pid as number)[0];
      run.child.kill('SIGKILL');
      await until(
        async () => (await ask('127.10.7.1', 8080, 'x', 1000)) === 'ECONNREFUSED',
        'the listener to close',
        15_000,
      );
      await until(
        () => !alive(script as number) && !alive(daemon as number),
        'both to exit',
        15_000,
      );
    } finally {
      reap(run.child.pid, script, daemon);
    }
  });

  it('stops on SIGHUP, and reports a daemon killed by a signal as such', async () => {
    const hup = startExample('127.10.8.1');
    const killed = startExample('127.10.8.11');
    try {
      await until(() => hup.out().includes('Press Ctrl-C to stop.'), 'the banner', 60_000);
      hup.child.kill('SIGHUP');
      expect((await hup.exited).code).toBe(0);
      expect(hup.out()).toContain('stopped.');
      expect(await ask('127.10.8.1', 8080, 'x', 1000)).toBe('ECONNREFUSED');

      await until(() => killed.out().includes('Press Ctrl-C to stop.'), 'the banner', 60_000);
      process.kill(daemonPid(killed.out()), 'SIGKILL');
      expect(await killed.exited).toEqual({ code: 137, signal: null });
      expect(killed.out()).toContain('the daemon was killed by SIGKILL.');
      expect(killed.out()).not.toContain('exited with code');
    } finally {
      reap(hup.child.pid, killed.child.pid, daemonPid(hup.out()), daemonPid(killed.out()));
    }
  });
});
