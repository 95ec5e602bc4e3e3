import dgram from 'node:dgram';
import net from 'node:net';

/** Connects to `host:port` (default 127.0.0.1) with `allowHalfOpen`, resolving once connected. */
export function connectTcp(port: number, host = '127.0.0.1'): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host, allowHalfOpen: true });
    socket.once('connect', () => {
      socket.removeListener('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

/**
 * Everything `socket` reads until its peer's FIN, and how the socket ended: 'end' (a clean FIN),
 * or the error code (ECONNRESET…) when it was cut off. Never rejects.
 */
export function readToEnd(socket: net.Socket): Promise<{ data: Buffer; ended: string }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let ended = 'close';
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.once('end', () => {
      ended = 'end';
      resolve({ data: Buffer.concat(chunks), ended });
    });
    socket.once('error', (error: NodeJS.ErrnoException) => {
      ended = error.code ?? error.message;
    });
    socket.once('close', () => resolve({ data: Buffer.concat(chunks), ended }));
  });
}

/** Resolves with the first `length` bytes `socket` reads (or rejects if it closes first). */
export function readBytes(socket: net.Socket, length: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
      total += chunk.length;
      if (total >= length) {
        cleanup();
        resolve(Buffer.concat(chunks).subarray(0, length));
      }
    };
    const onClose = (): void => {
      cleanup();
      reject(new Error(`socket closed after ${total} of ${length} bytes`));
    };
    const cleanup = (): void => {
      socket.removeListener('data', onData);
      socket.removeListener('close', onClose);
    };
    socket.on('data', onData);
    socket.once('close', onClose);
  });
}

/** A UDP client socket bound on loopback, with a promise of its next datagram. */
export interface UdpTestClient {
  readonly socket: dgram.Socket;
  readonly port: number;
  /** Sends to `port` on `host` (default 127.0.0.1). */
  send(data: Buffer | string, port: number, host?: string): void;
  /** The next datagram received (and who sent it), or rejects after `timeoutMs`. */
  next(timeoutMs?: number): Promise<{ data: Buffer; from: dgram.RemoteInfo }>;
  close(): Promise<void>;
}

/** Opens a UDP client on `host` (default 127.0.0.1) with a queue of what it receives. */
export async function udpClient(host = '127.0.0.1'): Promise<UdpTestClient> {
  const socket = dgram.createSocket({ type: net.isIPv6(host) ? 'udp6' : 'udp4' });
  const queue: { data: Buffer; from: dgram.RemoteInfo }[] = [];
  const waiters: ((item: { data: Buffer; from: dgram.RemoteInfo }) => void)[] = [];
  socket.on('message', (data, from) => {
    const waiter = waiters.shift();
    if (waiter) waiter({ data, from });
    else queue.push({ data, from });
  });
  socket.on('error', () => {});
  await new Promise<void>((resolve) => socket.bind({ address: host, port: 0 }, () => resolve()));
  return {
    socket,
    port: socket.address().port,
    send: (data, port, to = '127.0.0.1') => socket.send(data, port, to),
    next: (timeoutMs = 5_000) => {
      const queued = queue.shift();
      if (queued) return Promise.resolve(queued);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          const i = waiters.indexOf(waiter);
          if (i >= 0) waiters.splice(i, 1);
          reject(new Error(`no datagram within ${timeoutMs} ms`));
        }, timeoutMs);
        const waiter = (item: { data: Buffer; from: dgram.RemoteInfo }): void => {
          clearTimeout(timer);
          resolve(item);
        };
        waiters.push(waiter);
      });
    },
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
