import { createSocket } from 'node:dgram';
import { type AddressInfo, createServer, type Server, Socket } from 'node:net';

/**
 * A process of its own for the probes' many sockets: the half-close probe's clients and backends
 * (10 000 each would not fit beside each other under one process's descriptor limit) and the UDP
 * flood's short-lived senders. Run by {@link PeerProcess} (bench's child.ts, role
 * `reliability-peer`); its methods are called over IPC.
 */

const servers: Server[] = [];
const held = new Set<Socket>();
const clients: Socket[] = [];
const ends = { reset: 0, fin: 0, other: 0 };

/** Notes how a socket ended: RST (ECONNRESET), a FIN, or otherwise. */
function watchEnd(s: Socket): void {
  let how: 'reset' | 'fin' | 'other' | undefined;
  s.on('error', (e: NodeJS.ErrnoException) => {
    how ??= e.code === 'ECONNRESET' ? 'reset' : 'other';
  });
  s.on('end', () => {
    how ??= 'fin';
  });
  s.on('close', () => {
    held.delete(s);
    ends[how ?? 'other']++;
  });
}

/** The peer's methods, served by child.ts. */
export const peerMethods = {
  /**
   * A backend that accepts, reads and never writes or closes: after the client's FIN its socket
   * stays in CLOSE_WAIT (allowHalfOpen), so only the proxy's half-close timeout can end it.
   */
  async silentBackend(ip: string): Promise<number> {
    const server = createServer({ allowHalfOpen: true }, (s) => {
      held.add(s);
      s.resume();
      watchEnd(s);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ port: 0, host: ip, backlog: 4096 }, () => resolve());
    });
    servers.push(server);
    return (server.address() as AddressInfo).port;
  },
  /** Opens `n` connections to host:port (`batch` at a time); resolves with how many connected. */
  async connect(host: string, port: number, n: number, batch: number): Promise<number> {
    let ok = 0;
    for (let i = 0; i < n; i += batch) {
      const wave: Promise<boolean>[] = [];
      for (let j = i; j < Math.min(n, i + batch); j++) {
        wave.push(
          new Promise((resolve) => {
            const s = new Socket({ allowHalfOpen: true });
            s.once('error', () => resolve(false));
            s.connect(port, host, () => {
              clients.push(s);
              held.add(s);
              watchEnd(s);
              // Reading, so the reset surfaces as ECONNRESET (a socket that never reads sees nothing).
              s.resume();
              s.write('x');
              resolve(true);
            });
          }),
        );
      }
      ok += (await Promise.all(wave)).filter(Boolean).length;
    }
    return ok;
  },
  /** Half-closes every client connection (FIN), leaving it open for reading. */
  halfClose(): number {
    for (const s of clients) if (!s.destroyed) s.end();
    return clients.length;
  },
  /** Sockets still open here, and how the others ended. */
  stats(): { open: number; reset: number; fin: number; other: number } {
    return { open: held.size, ...ends };
  },
  /**
   * Sends one datagram from each of `ports` consecutive source ports on each of `sources`, each from
   * a socket bound for it and closed after (`batch` sockets at a time), so the proxy sees that many
   * distinct clients. Resolves with the datagrams sent and the failures to bind or send.
   */
  async udpFlood(
    host: string,
    port: number,
    sources: string[],
    ports: number,
    basePort: number,
    batch: number,
  ): Promise<{ sent: number; failed: number }> {
    let sent = 0;
    let failed = 0;
    const payload = Buffer.alloc(64, 'f');
    const one = (address: string, p: number) =>
      new Promise<void>((resolve) => {
        const s = createSocket('udp4');
        const done = (ok: boolean) => {
          if (ok) sent++;
          else failed++;
          s.close();
          resolve();
        };
        s.once('error', () => done(false));
        s.bind(p, address, () => s.send(payload, port, host, (err) => done(!err)));
      });
    for (let i = 0; i < ports; i += batch) {
      const wave: Promise<void>[] = [];
      for (const address of sources) {
        for (let j = i; j < Math.min(ports, i + batch); j++) wave.push(one(address, basePort + j));
      }
      await Promise.all(wave);
    }
    return { sent, failed };
  },
  /** Closes everything. */
  async close(): Promise<void> {
    for (const s of held) s.destroy();
    await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  },
};

/** The peer's methods, as the parent calls them. */
export type PeerMethods = typeof peerMethods;
