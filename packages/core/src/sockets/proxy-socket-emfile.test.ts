import { type ChildProcess, spawn } from 'node:child_process';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { startTcpServer } from '../test-support/echo-servers.js';
import { connectTcp, readBytes } from '../test-support/net-clients.js';
import { waitFor } from '../test-support/wait-for.js';

const CHILD = fileURLToPath(new URL('../test-support/tcp-proxy-child.ts', import.meta.url));
const REPO = fileURLToPath(new URL('../../../../', import.meta.url));

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

interface Child {
  process: ChildProcess;
  port: number;
  events: { event: string; detail: string }[];
  exited: () => boolean;
}

/** Runs the proxy child with at most `fds` open descriptors. */
async function startChild(endpoint: string, fds: number): Promise<Child> {
  const child = spawn(
    'bash',
    ['-c', `ulimit -n ${fds} && exec "${process.execPath}" --import tsx "${CHILD}" ${endpoint}`],
    { cwd: REPO, stdio: ['pipe', 'pipe', 'inherit'] },
  );
  let exited = false;
  child.on('exit', () => {
    exited = true;
  });
  cleanup.push(() => {
    if (!exited) child.kill();
  });
  const events: { event: string; detail: string }[] = [];
  let port = 0;
  let pending = '';
  child.stdout?.on('data', (data: Buffer) => {
    pending += data.toString();
    for (let nl = pending.indexOf('\n'); nl >= 0; nl = pending.indexOf('\n')) {
      const line = JSON.parse(pending.slice(0, nl)) as {
        listening?: number;
        event?: string;
        detail?: string;
      };
      pending = pending.slice(nl + 1);
      if (line.listening !== undefined) port = line.listening;
      else events.push({ event: String(line.event), detail: String(line.detail) });
    }
  });
  await waitFor(() => port > 0 || exited, 15_000, 'child listening');
  return { process: child, port, events, exited: () => exited };
}

describe('TCP proxy socket out of file descriptors', () => {
  it('keeps running through EMFILE and proxies again once descriptors are free', async () => {
    const backend = await startTcpServer({ host: '127.1.7.2' });
    cleanup.push(() => backend.close());
    const child = await startChild(backend.endpoint, 64);
    expect(child.exited()).toBe(false);

    // Open far more connections than 64 descriptors allow (each proxied one needs two).
    const clients: net.Socket[] = [];
    cleanup.push(() => {
      for (const c of clients) c.destroy();
    });
    let closedEarly = 0;
    for (let i = 0; i < 120; i++) {
      const c = net.connect({ port: child.port, host: '127.0.0.1' });
      c.on('error', () => {});
      c.on('close', () => closedEarly++);
      clients.push(c);
    }
    // Some connections are proxied; the rest are shed (closed by libuv's EMFILE handling, or
    // refused when the dial itself hits EMFILE), never leaving the child dead.
    await waitFor(() => closedEarly > 0, 15_000, 'some connections shed');
    await waitFor(() => backend.accepted > 0, 15_000, 'some connections proxied');
    expect(backend.accepted).toBeLessThan(64);
    expect(child.exited()).toBe(false);

    for (const c of clients) c.destroy();
    await waitFor(() => backend.sockets.size === 0, 15_000, 'proxied connections closed');

    // Descriptors are free again: the same listener proxies new connections.
    const after = await waitFor(
      async () => {
        const c = await connectTcp(child.port, '127.0.0.1');
        c.on('error', () => {});
        clients.push(c);
        c.write('again');
        return (await readBytes(c, 5)).toString() === 'again' ? c : undefined;
      },
      15_000,
      'proxying again',
    );
    expect(after).toBeDefined();
    expect(child.exited()).toBe(false);
    child.process.stdin?.write('exit\n');
    await waitFor(() => child.exited(), 15_000, 'child exits cleanly');
    expect(child.process.exitCode).toBe(0);
  });
});
