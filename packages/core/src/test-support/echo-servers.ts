import dgram from 'node:dgram';
import net from 'node:net';
import { joinHostPort } from '../model/service-port-name.js';

/** A loopback TCP server for tests; by default it echoes and half-closes when the client does. */
export interface TcpTestServer {
  readonly server: net.Server;
  readonly host: string;
  readonly port: number;
  /** "host:port", as a load balancer returns endpoints. */
  readonly endpoint: string;
  /** Open server-side sockets. */
  readonly sockets: Set<net.Socket>;
  /** Connections accepted so far. */
  accepted: number;
  /** Destroys every connection and closes the listener. */
  close(): Promise<void>;
}

/**
 * Starts a TCP server on `host` (default 127.0.0.1) with `allowHalfOpen`, so half-close behaviour
 * is observable. The default handler echoes every byte and ends its side after the client ended
 * its own (a FIN is answered after the echo is flushed); pass `onConnection` for anything else.
 */
export async function startTcpServer(
  opts: { host?: string; port?: number; onConnection?: (socket: net.Socket) => void } = {},
): Promise<TcpTestServer> {
  const host = opts.host ?? '127.0.0.1';
  const handler = opts.onConnection ?? ((socket: net.Socket) => socket.pipe(socket));
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ allowHalfOpen: true });
  const result: TcpTestServer = {
    server,
    host,
    port: 0,
    endpoint: '',
    sockets,
    accepted: 0,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  server.on('connection', (socket) => {
    result.accepted++;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    handler(socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port: opts.port ?? 0 }, () => resolve());
  });
  const { port } = server.address() as net.AddressInfo;
  return Object.assign(result, { port, endpoint: joinHostPort(host, port) });
}

/** A loopback UDP echo server for tests. */
export interface UdpEchoServer {
  readonly socket: dgram.Socket;
  readonly host: string;
  readonly port: number;
  readonly endpoint: string;
  /** Source "ip:port" and size of every datagram received, in order. */
  readonly received: { from: string; size: number }[];
  close(): Promise<void>;
}

/**
 * Starts a UDP server that sends every datagram back to its sender unchanged (a prefix can be
 * added to tell servers apart). Default host 127.0.0.1.
 */
export async function startUdpEchoServer(
  opts: { host?: string; port?: number; prefix?: string } = {},
): Promise<UdpEchoServer> {
  const host = opts.host ?? '127.0.0.1';
  const socket = dgram.createSocket({ type: net.isIPv6(host) ? 'udp6' : 'udp4' });
  const received: { from: string; size: number }[] = [];
  const prefix = opts.prefix === undefined ? undefined : Buffer.from(opts.prefix);
  socket.on('message', (msg, rinfo) => {
    received.push({ from: joinHostPort(rinfo.address, rinfo.port), size: msg.length });
    socket.send(prefix ? Buffer.concat([prefix, msg]) : msg, rinfo.port, rinfo.address);
  });
  socket.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind({ address: host, port: opts.port ?? 0 }, () => resolve());
  });
  const { port } = socket.address();
  return {
    socket,
    host,
    port,
    endpoint: joinHostPort(host, port),
    received,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
