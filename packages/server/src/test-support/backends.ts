import type { AddressInfo } from 'node:net';
import { createServer, type Server, Socket } from 'node:net';

/**
 * Small TCP backends on loopback for daemon tests: each answers every chunk with "<name>:<chunk>",
 * so a test can tell which endpoint a connection reached.
 */

export interface Backends {
  /** The one port every backend listens on (on its own address). */
  port: number;
  close(): Promise<void>;
}

/** Starts one echo backend per address, all on the same port. */
export async function startBackends(addresses: Record<string, string>): Promise<Backends> {
  const servers: Server[] = [];
  const sockets = new Set<Socket>();
  let port = 0;
  for (const [name, ip] of Object.entries(addresses)) {
    const server = createServer((socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => {});
      socket.on('data', (chunk) => socket.write(`${name}:${chunk.toString()}`));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, ip, () => resolve());
    });
    port = (server.address() as AddressInfo).port;
    servers.push(server);
  }
  return {
    port,
    close: async () => {
      for (const s of sockets) s.destroy();
      await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
    },
  };
}

/** A client connection that collects what it receives. */
export class Client {
  readonly socket: Socket;
  received = '';
  closed = false;

  constructor(host: string, port: number) {
    this.socket = new Socket();
    this.socket.on('data', (chunk) => {
      this.received += chunk.toString();
    });
    this.socket.on('close', () => {
      this.closed = true;
    });
    this.socket.on('error', () => {});
    this.socket.connect(port, host);
  }

  /** Sends `text` and waits (with a deadline) for `expected` to arrive. */
  async roundTrip(text: string, expected: string, timeoutMs = 10_000): Promise<void> {
    const before = this.received.length;
    this.socket.write(text);
    const deadline = Date.now() + timeoutMs;
    while (!this.received.slice(before).includes(expected)) {
      if (Date.now() > deadline || this.closed) {
        throw new Error(
          `expected ${JSON.stringify(expected)}, got ${JSON.stringify(this.received.slice(before))}`,
        );
      }
      await new Promise((r) => setTimeout(r, 5));
    }
  }
}

/** Connects, sends `text` and returns the first answer, or the error code ("ECONNREFUSED"). */
export async function ask(
  host: string,
  port: number,
  text: string,
  timeoutMs = 10_000,
): Promise<string> {
  return new Promise((resolve) => {
    const socket = new Socket();
    let answer = '';
    const timer = setTimeout(() => {
      socket.destroy();
      resolve(answer || 'TIMEOUT');
    }, timeoutMs);
    socket.on('data', (chunk) => {
      answer += chunk.toString();
      clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      resolve(err.code ?? err.message);
    });
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(answer || 'CLOSED');
    });
    socket.connect(port, host, () => socket.write(text));
  });
}
