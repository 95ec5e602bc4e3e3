import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { adoptAcceptedSocket, TcpRelay } from './tcp-relay.js';
import { startTcpServer, type TcpTestServer } from './test-support/echo-servers.js';
import { connectTcp, readToEnd } from './test-support/net-clients.js';
import { waitFor } from './test-support/wait-for.js';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

/**
 * A front server whose accepted sockets are relayed to `backend` by a TcpRelay, either with the
 * relay's own read buffers (adopted client, backend dialled with `down.onread`) or with plain
 * sockets read through 'data' events.
 */
async function front(
  backend: TcpTestServer,
  buffered: boolean,
): Promise<{ port: number; relays: TcpRelay[] }> {
  const relays: TcpRelay[] = [];
  const server = net.createServer({ pauseOnConnect: true, allowHalfOpen: true }, (raw) => {
    const relay = new TcpRelay({ idleTimeoutMs: 0, halfCloseTimeoutMs: 10_000 });
    relays.push(relay);
    const adopted = buffered
      ? adoptAcceptedSocket(raw, relay.up.onread)
      : { socket: raw, usesOnread: false };
    adopted.socket.on('error', () => {});
    relay.down.setDestination(adopted.socket);
    const upstream = net.connect({
      host: backend.host,
      port: backend.port,
      allowHalfOpen: true,
      ...(buffered ? { onread: relay.down.onread } : {}),
    });
    upstream.on('error', () => {});
    upstream.once('connect', () =>
      relay.start(adopted.socket, upstream, { client: adopted.usesOnread, backend: buffered }),
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

describe('TcpRelay', () => {
  for (const buffered of [true, false]) {
    it(`keeps every byte of many concurrent uneven transfers (${buffered ? 'own buffers' : "'data' events"})`, async () => {
      const backend = await slowEcho();
      const { port, relays } = await front(backend, buffered);
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
      });
    });
  }
});
