import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { startTcpServer, type TcpTestServer } from '../test-support/echo-servers.js';
import { connectTcp, readToEnd } from '../test-support/net-clients.js';
import { waitFor } from '../test-support/wait-for.js';
import { adoptAcceptedSocket, relayReadPathCounts } from './tcp-read-path.js';
import {
  connectForRelay,
  RELAY_LARGE_BUFFER_BYTES,
  RELAY_ONREAD,
  RELAY_SHARED_BUFFER_BYTES,
  TcpRelay,
} from './tcp-relay.js';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

/** How a test front server's relay reads: the shared options, its own per-pump options, or 'data'. */
type ReadMode = 'shared' | 'own buffers' | "'data' events";

/**
 * A front server whose accepted sockets are relayed to `backend` by a TcpRelay, either with the
 * process-wide RELAY_ONREAD (as the default TCP socket does), with the relay's own per-pump read
 * options (adopted client, backend dialled with `down.onread`), or with plain sockets read through
 * 'data' events.
 */
async function front(
  backend: TcpTestServer,
  mode: ReadMode,
): Promise<{ port: number; relays: TcpRelay[] }> {
  const relays: TcpRelay[] = [];
  const server = net.createServer({ pauseOnConnect: true, allowHalfOpen: true }, (raw) => {
    const relay = new TcpRelay({ idleTimeoutMs: 0, halfCloseTimeoutMs: 10_000 });
    relays.push(relay);
    const onread =
      mode === 'shared' ? RELAY_ONREAD : mode === 'own buffers' ? relay.down.onread : undefined;
    const adopted =
      mode === "'data' events"
        ? { socket: raw, usesOnread: false }
        : adoptAcceptedSocket(raw, mode === 'shared' ? RELAY_ONREAD : relay.up.onread);
    adopted.socket.on('error', () => {});
    relay.down.setDestination(adopted.socket);
    const { socket: upstream, usesOnread: backendUsesOnread } = connectForRelay(
      (o: net.TcpNetConnectOpts) => net.connect(o),
      {
        host: backend.host,
        port: backend.port,
        allowHalfOpen: true,
        ...(onread ? { onread } : {}),
      },
    );
    // Only the shared options are detected; per-pump ones say so through `bufferRequested`.
    if (mode === 'own buffers') expect(backendUsesOnread).toBe(false);
    upstream.on('error', () => {});
    upstream.once('connect', () =>
      relay.start(adopted.socket, upstream, {
        client: adopted.usesOnread,
        backend: mode === 'shared' ? backendUsesOnread : onread !== undefined,
      }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.1.6.1', resolve));
  cleanup.push(() => new Promise((resolve) => server.close(resolve)));
  return { port: (server.address() as net.AddressInfo).port, relays };
}

/** An echo backend that reads slowly and unevenly, so relay writes often stay queued. */
async function slowEcho(): Promise<TcpTestServer> {
  const server = await startTcpServer({
    host: '127.1.6.2',
    onConnection: (s) => {
      s.on('data', (chunk: Buffer) => {
        if (!s.write(chunk) || Math.random() < 0.1) {
          s.pause();
          setTimeout(() => s.resume(), Math.random() < 0.5 ? 0 : 2);
        }
      });
      s.on('end', () => s.end());
    },
  });
  cleanup.push(() => server.close());
  return server;
}

function digest(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

describe('TcpRelay half-close timeout', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('runs from the FIN, however long the connection was silent before it', async () => {
    // The wheels' clock and ticks are fake; sockets, and the polls below, run in real time.
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'performance'] });
    vi.advanceTimersByTime(1_000); // the fake clock starts at 0, which `lastActive` also starts at
    let endpoint: net.Socket | undefined;
    let endpointEnded = false;
    const backend = await startTcpServer({
      host: '127.1.6.3',
      onConnection: (s) => {
        endpoint = s;
        s.on('error', () => {}); // the reset at the end
        s.on('data', () => {});
        s.on('end', () => {
          endpointEnded = true; // and never closes: the proxy's leg waits in FIN_WAIT2
        });
      },
    });
    cleanup.push(() => backend.close());
    const relay = new TcpRelay({ idleTimeoutMs: 0, halfCloseTimeoutMs: 1_000 });
    const server = net.createServer({ pauseOnConnect: true, allowHalfOpen: true }, (raw) => {
      const adopted = adoptAcceptedSocket(raw, RELAY_ONREAD);
      const { socket: upstream, usesOnread } = connectForRelay(
        (o: net.TcpNetConnectOpts) => net.connect(o),
        { host: backend.host, port: backend.port, allowHalfOpen: true, onread: RELAY_ONREAD },
      );
      upstream.once('connect', () =>
        relay.start(adopted.socket, upstream, { client: adopted.usesOnread, backend: usesOnread }),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, '127.1.6.4', resolve));
    cleanup.push(() => new Promise((resolve) => server.close(resolve)));
    const client = await connectTcp((server.address() as net.AddressInfo).port, '127.1.6.4');
    cleanup.push(() => client.destroy());
    let received = '';
    client.on('data', (d: Buffer) => {
      received += d.toString();
    });
    let clientError: string | undefined;
    client.on('error', (e: NodeJS.ErrnoException) => {
      clientError = e.code;
    });
    await waitFor(() => endpoint !== undefined && relay.lastActive > 0, 5_000, 'the relay');

    vi.advanceTimersByTime(60_000); // a minute of silence: sixty times the half-close timeout
    client.end();
    await waitFor(() => endpointEnded, 5_000, 'the FIN at the endpoint');
    vi.advanceTimersByTime(900); // 14 ticks of the wheel, still inside the timeout after the FIN
    endpoint?.write('still here');
    await waitFor(() => received === 'still here', 5_000, 'the answer after the FIN');

    vi.advanceTimersByTime(1_200); // the timeout after the FIN, and its last tick
    await waitFor(() => clientError === 'ECONNRESET', 5_000, 'the client reset');
  });
});

describe('TcpRelay', () => {
  for (const mode of ['shared', 'own buffers', "'data' events"] as const) {
    it(`keeps every byte of many concurrent uneven transfers (${mode})`, async () => {
      const backend = await slowEcho();
      const { port, relays } = await front(backend, mode);
      const transfers = Array.from({ length: 12 }, async () => {
        const payload = randomBytes(512 * 1024 + Math.floor(Math.random() * 100_000));
        const c = await connectTcp(port, '127.1.6.1');
        cleanup.push(() => c.destroy());
        const result = readToEnd(c);
        let offset = 0;
        while (offset < payload.length) {
          const size = [1, 100, 4096, 4097, 65_536, 200_000][
            Math.floor(Math.random() * 6)
          ] as number;
          const ok = c.write(payload.subarray(offset, offset + size));
          offset += size;
          if (!ok) await new Promise((resolve) => c.once('drain', resolve));
        }
        c.end();
        const { data, ended } = await result;
        return {
          ok: digest(data) === digest(payload),
          length: data.length,
          ended,
          want: payload.length,
        };
      });
      for (const r of await Promise.all(transfers)) {
        expect(r).toEqual({ ok: true, length: r.want, ended: 'end', want: r.want });
      }
      await waitFor(() => relays.every((r) => r.durationMs > 0 && r.bytesIn === r.bytesOut), 5_000);
    });
  }

  it('never reads into a buffer that a queued write still holds', async () => {
    const accepted: net.Socket[] = [];
    const server = net.createServer({ pauseOnConnect: true }, (s) => accepted.push(s));
    await new Promise<void>((resolve) => server.listen(0, '127.1.6.1', resolve));
    cleanup.push(() => new Promise((resolve) => server.close(resolve)));
    const c = await connectTcp((server.address() as net.AddressInfo).port, '127.1.6.1');
    cleanup.push(() => c.destroy());
    await waitFor(() => accepted.length === 1);
    // A destination that completes every write later and checks its bytes did not change meanwhile.
    const received: Buffer[] = [];
    let changedInFlight = 0;
    const dst = new Writable({
      highWaterMark: 1,
      write(chunk: Buffer, _encoding, callback) {
        const copy = Buffer.from(chunk);
        setTimeout(() => {
          if (!copy.equals(chunk)) changedInFlight++;
          received.push(copy);
          callback();
        }, 1);
      },
    });
    const relay = new TcpRelay({ idleTimeoutMs: 0, halfCloseTimeoutMs: 0 });
    const adopted = adoptAcceptedSocket(accepted[0] as net.Socket, relay.up.onread);
    cleanup.push(() => adopted.socket.destroy());
    relay.up.attach(adopted.socket, dst as unknown as net.Socket, true);
    adopted.socket.resume();
    const payload = randomBytes(2 * 1024 * 1024);
    c.write(payload);
    await waitFor(() => received.reduce((n, b) => n + b.length, 0) >= payload.length, 10_000);
    expect(changedInFlight).toBe(0);
    expect(Buffer.concat(received).equals(payload)).toBe(true);
    expect(received.some((b) => b.length > 4096)).toBe(true);
  });

  it("finds each socket's buffer through the shared read options, bound or not, as Node asks", async () => {
    const backendGot: Buffer[] = [];
    const backend = await startTcpServer({
      host: '127.1.6.2',
      onConnection: (s) => s.on('data', (chunk: Buffer) => backendGot.push(chunk)),
    });
    cleanup.push(() => backend.close());
    const accepted: net.Socket[] = [];
    const server = net.createServer({ pauseOnConnect: true, allowHalfOpen: true }, (raw) =>
      accepted.push(raw),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.1.6.1', resolve));
    cleanup.push(() => new Promise((resolve) => server.close(resolve)));
    const c = await connectTcp((server.address() as net.AddressInfo).port, '127.1.6.1');
    cleanup.push(() => c.destroy());
    await waitFor(() => accepted.length === 1);
    const adopted = adoptAcceptedSocket(accepted[0] as net.Socket, RELAY_ONREAD);
    // A `connect` that drops the option is told apart from one that passes it on.
    const plain = connectForRelay(
      (o: net.TcpNetConnectOpts) => net.connect({ host: o.host, port: o.port }),
      { host: backend.host, port: backend.port, onread: RELAY_ONREAD },
    );
    plain.socket.on('error', () => {});
    cleanup.push(() => plain.socket.destroy());
    expect(plain.usesOnread).toBe(false);
    const dialled = connectForRelay((o: net.TcpNetConnectOpts) => net.connect(o), {
      host: backend.host,
      port: backend.port,
      onread: RELAY_ONREAD,
    });
    expect(dialled.usesOnread).toBe(true);
    const upstream = dialled.socket;
    cleanup.push(() => upstream.destroy());
    await new Promise((resolve) => upstream.once('connect', resolve));
    const relay = new TcpRelay({ idleTimeoutMs: 0, halfCloseTimeoutMs: 0 });
    relay.start(adopted.socket, upstream, { client: adopted.usesOnread, backend: true });
    // What Node does per read: the callback bound to the socket, then the generator unbound.
    const read = RELAY_ONREAD.callback as (this: net.Socket, n: number, buf: Buffer) => boolean;
    const next = RELAY_ONREAD.buffer as () => Buffer;
    const first = next();
    expect(first.length).toBe(RELAY_SHARED_BUFFER_BYTES);
    first.fill(0x61);
    read.call(adopted.socket, RELAY_SHARED_BUFFER_BYTES, first);
    // A full light read means bulk: the next read must land in that socket's own large buffer.
    const large = next();
    expect(large.length).toBe(RELAY_LARGE_BUFFER_BYTES);
    large.fill(0x62, 0, 10);
    read.call(adopted.socket, 10, large);
    expect(next().length).toBe(RELAY_SHARED_BUFFER_BYTES); // bulk is over
    await waitFor(() => Buffer.concat(backendGot).length === RELAY_SHARED_BUFFER_BYTES + 10);
    expect(Buffer.concat(backendGot).subarray(-11).toString()).toBe('abbbbbbbbbb');
  });

  for (const inPlace of [true, false]) {
    it(`adopts a paused accepted socket ${inPlace ? 'in place' : 'into a new socket'}`, async () => {
      const accepted: net.Socket[] = [];
      const server = net.createServer({ pauseOnConnect: true }, (s) => accepted.push(s));
      await new Promise<void>((resolve) => server.listen(0, '127.1.6.1', resolve));
      cleanup.push(() => new Promise((resolve) => server.close(resolve)));
      const c = await connectTcp((server.address() as net.AddressInfo).port, '127.1.6.1');
      cleanup.push(() => c.destroy());
      await waitFor(() => accepted.length === 1);
      const raw = accepted[0] as net.Socket;
      const reads: string[] = [];
      const buffer = Buffer.alloc(64);
      const before = relayReadPathCounts();
      const adopted = adoptAcceptedSocket(
        raw,
        {
          buffer: () => buffer,
          callback: (n, buf) => {
            reads.push(Buffer.from(buf.subarray(0, n)).toString());
            return true;
          },
        },
        { inPlace },
      );
      cleanup.push(() => adopted.socket.destroy());
      expect(adopted.usesOnread).toBe(true);
      // Which path ran, as the counters a daemon exports see it.
      const path = inPlace ? 'in-place' : 'moved-handle';
      expect(adopted.path).toBe(path);
      expect(relayReadPathCounts()[path]).toBe(before[path] + 1);
      expect(adopted.socket === raw).toBe(inPlace);
      expect(raw.destroyed).toBe(!inPlace);
      expect(adopted.socket.remotePort).toBe(c.localPort);
      adopted.socket.resume();
      c.write('into my buffer');
      await waitFor(() => reads.join('') === 'into my buffer', 5_000, 'read through onread');
      adopted.socket.destroy();
      expect(adoptAcceptedSocket(adopted.socket, { buffer, callback: () => true })).toEqual({
        socket: adopted.socket,
        usesOnread: false,
        path: 'data-events',
      });
    });
  }
});

describe('TcpRelay start contract', () => {
  /** A pair: an accepted, paused client leg and a dialled backend leg (read through RELAY_ONREAD). */
  async function legs(greeting: string | undefined): Promise<{
    client: net.Socket;
    raw: net.Socket;
    backend: net.Socket;
    backendUsesOnread: boolean;
  }> {
    const backendServer = await startTcpServer({
      host: '127.1.6.3',
      onConnection: (s) => {
        if (greeting !== undefined) s.write(greeting);
        s.on('data', (chunk: Buffer) => s.write(chunk));
        s.on('end', () => s.end());
      },
    });
    cleanup.push(() => backendServer.close());
    const accepted: net.Socket[] = [];
    const server = net.createServer({ pauseOnConnect: true, allowHalfOpen: true }, (s) =>
      accepted.push(s),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.1.6.3', resolve));
    cleanup.push(() => new Promise((resolve) => server.close(resolve)));
    const client = await connectTcp((server.address() as net.AddressInfo).port, '127.1.6.3');
    cleanup.push(() => client.destroy());
    await waitFor(() => accepted.length === 1);
    const { socket: backend, usesOnread } = connectForRelay(
      (o: net.TcpNetConnectOpts) => net.connect(o),
      { host: backendServer.host, port: backendServer.port, onread: RELAY_ONREAD },
    );
    backend.on('error', () => {});
    await new Promise<void>((resolve) => backend.once('connect', resolve));
    return { client, raw: accepted[0] as net.Socket, backend, backendUsesOnread: usesOnread };
  }

  it('keeps what an endpoint that speaks first sent before a late start, and delivers it first', async () => {
    const { client, raw, backend, backendUsesOnread } = await legs('220 ready\r\n');
    expect(backendUsesOnread).toBe(true);
    // The greeting is read while nobody relays: it must be kept, and the backend left alive.
    await waitFor(() => backend.bytesRead >= 11, 5_000, 'the greeting read before start');
    expect(backend.destroyed).toBe(false);
    const closed: TcpRelay[] = [];
    const relay = new TcpRelay({
      idleTimeoutMs: 0,
      halfCloseTimeoutMs: 10_000,
      onClose: (r) => closed.push(r),
    });
    relay.start(raw, backend, { client: false, backend: true });
    client.write('echo me');
    client.end();
    const { data } = await readToEnd(client);
    expect(data.toString()).toBe('220 ready\r\necho me');
    await waitFor(() => closed.length === 1, 5_000, 'onClose after both sides closed');
  });

  it('finishes and calls onClose (not synchronously) when started on sockets that already closed', async () => {
    const { raw, backend } = await legs(undefined);
    raw.destroy();
    backend.destroy();
    await waitFor(() => raw.closed && backend.closed, 5_000, 'both closed');
    const closed: TcpRelay[] = [];
    const relay = new TcpRelay({
      idleTimeoutMs: 0,
      halfCloseTimeoutMs: 0,
      onClose: (r) => closed.push(r),
    });
    relay.start(raw, backend);
    expect(closed).toEqual([]);
    await waitFor(() => closed.length === 1, 5_000, 'onClose');
    expect(closed[0]).toBe(relay);
  });

  it('resets the live side and finishes when only one side is already dead', async () => {
    const { client, raw, backend } = await legs(undefined);
    backend.destroy();
    await waitFor(() => backend.closed, 5_000, 'backend closed');
    const closed: TcpRelay[] = [];
    const relay = new TcpRelay({
      idleTimeoutMs: 0,
      halfCloseTimeoutMs: 0,
      onClose: (r) => closed.push(r),
    });
    relay.start(raw, backend);
    const { ended } = await readToEnd(client);
    expect(ended).not.toBe('end');
    await waitFor(() => closed.length === 1, 5_000, 'onClose');
  });
});
