import diagnosticsChannel from 'node:diagnostics_channel';
import net from 'node:net';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CHANNELS, type DialErrorMessage } from '../diagnostics.js';
import { EndpointDialError, MissingEndpointsError, MissingServiceEntryError } from '../errors.js';
import { startTcpServer, type TcpTestServer } from '../test-support/echo-servers.js';
import { FakeLoadBalancer } from '../test-support/fake-load-balancer.js';
import { waitFor } from '../test-support/wait-for.js';
import { DialTimeoutError, tryConnectEndpoints } from './dial-endpoints.js';

const svc = { namespace: 'ns', name: 'web', port: 'http' };
const src = { address: '127.0.0.9', port: 40000 };

/** A loopback port with nothing listening: connecting to it is refused at once. */
async function closedPort(): Promise<string> {
  const server = await startTcpServer({ host: '127.1.2.1' });
  await server.close();
  return server.endpoint;
}

function recordDialErrors(): { messages: DialErrorMessage[]; stop: () => void } {
  const messages: DialErrorMessage[] = [];
  const listener = (message: unknown): void => {
    messages.push(message as DialErrorMessage);
  };
  diagnosticsChannel.subscribe(CHANNELS.dialError, listener);
  return { messages, stop: () => diagnosticsChannel.unsubscribe(CHANNELS.dialError, listener) };
}

describe('tryConnectEndpoints', () => {
  let echo: TcpTestServer;
  let dialErrors: ReturnType<typeof recordDialErrors>;

  beforeEach(async () => {
    echo = await startTcpServer({ host: '127.1.2.2' });
    dialErrors = recordDialErrors();
  });

  afterEach(async () => {
    dialErrors.stop();
    vi.useRealTimers();
    await echo.close();
  });

  it('connects to the endpoint the load balancer picks', async () => {
    const lb = new FakeLoadBalancer({ 'ns/web:http': [echo.endpoint] });
    const socket = await tryConnectEndpoints(svc, src, 'TCP', lb, {});
    expect(socket.remotePort).toBe(echo.port);
    expect(lb.calls).toEqual([
      { service: 'ns/web:http', srcAddr: src, sessionAffinityReset: false, result: echo.endpoint },
    ]);
    socket.destroy();
  });

  it('rejects at once, without retrying, when the Service has no endpoints', async () => {
    const lb = new FakeLoadBalancer({ 'ns/web:http': [] });
    await expect(tryConnectEndpoints(svc, src, 'TCP', lb)).rejects.toBeInstanceOf(
      MissingEndpointsError,
    );
    expect(lb.calls).toHaveLength(1);
  });

  it('rejects at once when the load balancer does not know the Service', async () => {
    const lb = new FakeLoadBalancer();
    await expect(tryConnectEndpoints(svc, src, 'TCP', lb)).rejects.toBeInstanceOf(
      MissingServiceEntryError,
    );
    expect(lb.calls).toHaveLength(1);
  });

  it('moves to the next endpoint after a failure and resets affinity', async () => {
    const dead = await closedPort();
    const lb = new FakeLoadBalancer({ 'ns/web:http': [dead, echo.endpoint] }, { affinity: true });
    const socket = await tryConnectEndpoints(svc, src, 'TCP', lb);
    expect(socket.remotePort).toBe(echo.port);
    expect(lb.calls.map((c) => [c.result, c.sessionAffinityReset])).toEqual([
      [dead, false],
      [echo.endpoint, true],
    ]);
    expect(dialErrors.messages).toHaveLength(1);
    expect(dialErrors.messages[0]).toMatchObject({
      service: 'ns/web:http',
      protocol: 'TCP',
      endpoint: dead,
    });
    expect((dialErrors.messages[0]?.error as NodeJS.ErrnoException | undefined)?.code).toBe(
      'ECONNREFUSED',
    );
    socket.destroy();
  });

  it('fails with EndpointDialError after one attempt per timeout', async () => {
    const dead = await closedPort();
    const lb = new FakeLoadBalancer({ 'ns/web:http': [dead] });
    const error = await tryConnectEndpoints(svc, src, 'TCP', lb, {
      timeoutsMs: [50, 50, 50],
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EndpointDialError);
    expect((error as EndpointDialError).message).toContain('after 3 attempt(s)');
    expect(((error as Error).cause as NodeJS.ErrnoException).code).toBe('ECONNREFUSED');
    expect(lb.calls.map((c) => c.sessionAffinityReset)).toEqual([false, true, true]);
    expect(dialErrors.messages).toHaveLength(3);
  });

  it('times an attempt out and tries the next endpoint (a blackholed endpoint)', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const blackholed: net.Socket[] = [];
    const connect = vi.fn((target: { host: string; port: number }) => {
      if (target.host === '127.1.9.9') {
        // Never connects, like a SYN sent into a black hole.
        const socket = new net.Socket();
        blackholed.push(socket);
        return socket;
      }
      return net.connect(target);
    });
    const lb = new FakeLoadBalancer({ 'ns/web:http': ['127.1.9.9:80', echo.endpoint] });
    const dialing = tryConnectEndpoints(svc, src, 'TCP', lb, { connect });
    await vi.advanceTimersByTimeAsync(249);
    expect(lb.calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    vi.useRealTimers();
    const socket = await dialing;
    expect(socket.remotePort).toBe(echo.port);
    expect(blackholed[0]?.destroyed).toBe(true);
    expect(dialErrors.messages[0]?.error).toBeInstanceOf(DialTimeoutError);
    socket.destroy();
  });

  it('resets an attempt that timed out after the kernel connected it, so its endpoint is not left half-closed', async () => {
    // An endpoint that waits for its client's FIN and never closes first (the soak suite's backend).
    const ends: string[] = [];
    const accepted: net.Socket[] = [];
    const server = net.createServer({ allowHalfOpen: true }, (s) => {
      accepted.push(s);
      s.resume();
      s.on('error', (e: NodeJS.ErrnoException) => ends.push(e.code ?? 'error'));
      s.on('end', () => ends.push('FIN'));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.1.2.3', resolve));
    const port = (server.address() as net.AddressInfo).port;
    try {
      const lb = new FakeLoadBalancer({ 'ns/web:http': [`127.1.2.3:${port}`] });
      const dialing = tryConnectEndpoints(svc, src, 'TCP', lb, { timeoutsMs: [5, 5000] });
      // Node connects to an IP on the next tick; then the loop is busy for longer than the first
      // attempt's timeout, so that timer runs before the 'connect' of the handshake the kernel did.
      await new Promise((resolve) => process.nextTick(resolve));
      const until = performance.now() + 60;
      while (performance.now() < until) {
        // busy, like a daemon relaying thousands of connections
      }
      const socket = await dialing;
      expect(lb.calls).toHaveLength(2);
      expect(dialErrors.messages[0]?.error).toBeInstanceOf(DialTimeoutError);
      // The given-up attempt reached the endpoint: it must learn with an RST that it is gone.
      await waitFor(() => ends.length > 0 || undefined);
      expect(ends).toEqual(['ECONNRESET']);
      socket.destroy();
    } finally {
      for (const s of accepted) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('does not retry when this host is out of descriptors (EMFILE)', async () => {
    const connect = (): net.Socket => {
      const socket = new net.Socket();
      const error = Object.assign(new Error('connect EMFILE'), { code: 'EMFILE' });
      process.nextTick(() => socket.destroy(error));
      return socket;
    };
    const lb = new FakeLoadBalancer({ 'ns/web:http': [echo.endpoint, echo.endpoint] });
    const error = await tryConnectEndpoints(svc, src, 'TCP', lb, { connect }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(EndpointDialError);
    expect(((error as Error).cause as NodeJS.ErrnoException).code).toBe('EMFILE');
    expect(lb.calls).toHaveLength(1);
  });

  it('treats an endpoint that is not "ip:port" and a throwing connect as failed attempts', async () => {
    let calls = 0;
    const connect = (target: { host: string; port: number }): net.Socket => {
      calls++;
      if (calls === 1) throw new RangeError('boom');
      return net.connect(target);
    };
    const lb = new FakeLoadBalancer({
      'ns/web:http': ['not-an-endpoint', 'db.example:80', echo.endpoint, echo.endpoint],
    });
    const socket = await tryConnectEndpoints(svc, src, 'TCP', lb, { connect });
    expect(socket.remotePort).toBe(echo.port);
    expect(dialErrors.messages.map((m) => m.error.message)).toEqual([
      'invalid endpoint "not-an-endpoint"',
      'invalid endpoint "db.example:80"',
      'boom',
    ]);
    socket.destroy();
  });

  it('aborts the attempt in flight when the signal fires', async () => {
    const pending: net.Socket[] = [];
    const connect = (): net.Socket => {
      const socket = new net.Socket();
      pending.push(socket);
      return socket;
    };
    const lb = new FakeLoadBalancer({ 'ns/web:http': [echo.endpoint] });
    const controller = new AbortController();
    const dialing = tryConnectEndpoints(svc, src, 'TCP', lb, {
      connect,
      signal: controller.signal,
    });
    controller.abort(new Error('client went away'));
    await expect(dialing).rejects.toThrow('client went away');
    expect(pending[0]?.destroyed).toBe(true);
    expect(dialErrors.messages).toHaveLength(0);
    await expect(
      tryConnectEndpoints(svc, src, 'TCP', lb, { signal: controller.signal }),
    ).rejects.toThrow('client went away');
  });

  it('takes over after a first attempt made elsewhere failed (failedFirst): reported, then attempt 2 with the second timeout', async () => {
    const dead = await closedPort();
    const results: [string, boolean][] = [];
    const lb = new FakeLoadBalancer({ 'ns/web:http': [echo.endpoint] }, { affinity: true });
    Object.assign(lb, {
      reportDialResult: (_svc: unknown, endpoint: string, ok: boolean) => {
        results.push([endpoint, ok]);
      },
    });
    const timeouts: number[] = [];
    const spy = vi.spyOn(globalThis, 'setTimeout');
    const error = Object.assign(new Error('refused'), { code: 'ECONNREFUSED' });
    const socket = await tryConnectEndpoints(svc, src, 'TCP', lb, {
      timeoutsMs: [100, 2345],
      failedFirst: { endpoint: dead, error },
    });
    for (const call of spy.mock.calls) timeouts.push(call[1] as number);
    spy.mockRestore();
    expect(socket.remotePort).toBe(echo.port);
    expect(lb.calls.map((c) => [c.result, c.sessionAffinityReset])).toEqual([
      [echo.endpoint, true],
    ]);
    expect(results).toEqual([
      [dead, false],
      [echo.endpoint, true],
    ]);
    expect(timeouts).toContain(2345);
    expect(dialErrors.messages.map((m) => [m.endpoint, m.error])).toEqual([[dead, error]]);
    socket.destroy();
  });

  it('with failedFirst and one timeout, fails with the first error as the cause', async () => {
    const lb = new FakeLoadBalancer({ 'ns/web:http': [echo.endpoint] });
    const error = new Error('timed out in the helper');
    const failure = tryConnectEndpoints(svc, src, 'TCP', lb, {
      timeoutsMs: [100],
      failedFirst: { endpoint: '127.1.2.3:1', error },
    });
    await expect(failure).rejects.toBeInstanceOf(EndpointDialError);
    await expect(failure).rejects.toMatchObject({ cause: error });
    expect(lb.calls).toHaveLength(0);
  });
});
