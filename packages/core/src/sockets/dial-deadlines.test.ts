import net from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { EndpointDialError } from '../errors.js';
import { startTcpServer } from '../test-support/echo-servers.js';
import { FakeLoadBalancer } from '../test-support/fake-load-balancer.js';
import { DialTimeoutError, tryConnectEndpoints } from './dial-endpoints.js';

const svc = { namespace: 'ns', name: 'web', port: 'http' };
const src = { address: '127.0.0.9', port: 40000 };

/** A connect that never connects, like a SYN sent into a black hole; the sockets it made. */
function blackhole(): { connect: () => net.Socket; sockets: net.Socket[] } {
  const sockets: net.Socket[] = [];
  return {
    sockets,
    connect: () => {
      const socket = new net.Socket();
      sockets.push(socket);
      return socket;
    },
  };
}

/** One turn of the real event loop (setImmediate is not faked here): the open buckets close. */
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

/** Whether a dial has settled yet, and how. */
function track(dialing: Promise<net.Socket>): { error?: unknown; settled: boolean } {
  const state: { error?: unknown; settled: boolean } = { settled: false };
  dialing.then(
    (socket) => {
      state.settled = true;
      socket.destroy();
    },
    (error: unknown) => {
      state.settled = true;
      state.error = error;
    },
  );
  return state;
}

describe('dial attempt deadlines', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('gives the attempts of one timeout started in one loop turn a single timer, still exact', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const hole = blackhole();
    const lb = new FakeLoadBalancer({ 'ns/web:http': ['127.1.9.9:80'] });
    const dials = Array.from({ length: 50 }, () =>
      track(tryConnectEndpoints(svc, src, 'TCP', lb, { connect: hole.connect, timeoutsMs: [250] })),
    );
    // One timer for the 50 attempts, not one each.
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(249);
    expect(dials.filter((d) => d.settled)).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(dials.filter((d) => d.settled)).toHaveLength(50);
    for (const d of dials) {
      expect(d.error).toBeInstanceOf(EndpointDialError);
      expect((d.error as Error).cause).toBeInstanceOf(DialTimeoutError);
    }
    expect(hole.sockets.every((s) => s.destroyed)).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('times an attempt of a later loop turn from its own start', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const hole = blackhole();
    const lb = new FakeLoadBalancer({ 'ns/web:http': ['127.1.9.9:80'] });
    const opts = { connect: hole.connect, timeoutsMs: [250] };
    const first = track(tryConnectEndpoints(svc, src, 'TCP', lb, opts));
    await nextTurn();
    await vi.advanceTimersByTimeAsync(100);
    const second = track(tryConnectEndpoints(svc, src, 'TCP', lb, opts));
    expect(vi.getTimerCount()).toBe(2);
    await vi.advanceTimersByTimeAsync(150);
    expect([first.settled, second.settled]).toEqual([true, false]);
    await vi.advanceTimersByTimeAsync(99);
    expect(second.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(second.settled).toBe(true);
  });

  it('stops the shared timer once every attempt waiting on it has connected', async () => {
    const server = await startTcpServer({ host: '127.1.9.10' });
    try {
      const lb = new FakeLoadBalancer({ 'ns/web:http': [server.endpoint] });
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
      const sockets = await Promise.all(
        Array.from({ length: 5 }, () =>
          tryConnectEndpoints(svc, src, 'TCP', lb, { timeoutsMs: [250] }),
        ),
      );
      expect(vi.getTimerCount()).toBe(0);
      for (const socket of sockets) socket.destroy();
    } finally {
      vi.useRealTimers();
      await server.close();
    }
  });

  it('goes on with the next attempt after a shared deadline, on a timer of its own', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const hole = blackhole();
    const lb = new FakeLoadBalancer({ 'ns/web:http': ['127.1.9.9:80'] });
    const opts = { connect: hole.connect, timeoutsMs: [50, 50] };
    const dials = [1, 2, 3].map(() => track(tryConnectEndpoints(svc, src, 'TCP', lb, opts)));
    await vi.advanceTimersByTimeAsync(50);
    expect(lb.calls).toHaveLength(6);
    expect(dials.some((d) => d.settled)).toBe(false);
    await vi.advanceTimersByTimeAsync(49);
    expect(dials.some((d) => d.settled)).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(dials.every((d) => d.settled)).toBe(true);
    expect(hole.sockets).toHaveLength(6);
  });
});
