import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { RetryingListener } from './http-listen.js';

const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
  vi.useRealTimers();
});

/** Waits for I/O (not for fake timers) until `check` passes, with a generous real-time deadline. */
async function untilIO(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** A server holding a loopback port, so the next bind there fails with EADDRINUSE. */
async function occupy(): Promise<{ server: Server; port: number }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise((r) => server.close(r)));
  return { server, port: (server.address() as AddressInfo).port };
}

describe('RetryingListener', () => {
  it('listens at once when the address is free', async () => {
    const listener = new RetryingListener(createServer(), {
      name: 'test',
      host: '127.0.0.1',
      port: 0,
      hardFail: false,
    });
    closers.push(() => listener.close());
    await listener.start();
    expect(listener.address()?.port).toBeGreaterThan(0);
  });

  it('retries every 5 s until the port is free, reporting each failure', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { server: blocker, port } = await occupy();
    const failures: string[] = [];
    const listener = new RetryingListener(createServer(), {
      name: 'metrics',
      host: '127.0.0.1',
      port,
      hardFail: false,
      onFailure: (err) => failures.push(err.message),
    });
    closers.push(() => listener.close());
    let listening = false;
    const started = listener.start().then(() => {
      listening = true;
    });
    await untilIO(() => failures.length === 1);
    expect(failures[0]).toMatch(
      new RegExp(`^failed to start metrics server on 127.0.0.1:${port}: .*EADDRINUSE`),
    );
    await vi.advanceTimersByTimeAsync(4999);
    expect(failures).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    await untilIO(() => failures.length === 2);
    await new Promise((r) => blocker.close(r));
    await vi.advanceTimersByTimeAsync(5000);
    await started;
    expect(listening).toBe(true);
    expect(listener.address()?.port).toBe(port);
  });

  it('rejects on the first failure with hard fail', async () => {
    const { port } = await occupy();
    const listener = new RetryingListener(createServer(), {
      name: 'healthz',
      host: '127.0.0.1',
      port,
      hardFail: true,
    });
    await expect(listener.start()).rejects.toThrow(/failed to start healthz server/);
  });

  it('stops retrying when closed, resolving start', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { port } = await occupy();
    const listener = new RetryingListener(createServer(), {
      name: 'x',
      host: '127.0.0.1',
      port,
      hardFail: false,
    });
    const started = listener.start();
    await vi.advanceTimersByTimeAsync(0);
    await listener.close();
    await expect(started).resolves.toBeUndefined();
    expect(vi.getTimerCount()).toBe(0);
  });
});
