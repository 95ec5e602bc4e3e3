import dgram from 'node:dgram';
import net from 'node:net';

/**
 * The baseline every scenario is compared with besides a direct connection: what anyone would write
 * in ten lines of Node — `pipe` both ways for TCP, one dgram socket per client for UDP — with none
 * of the proxy's bookkeeping.
 */
export async function naiveTcpRelay(host: string, port: number, target: number): Promise<void> {
  const server = net.createServer({ noDelay: true }, (client) => {
    const upstream = net.connect({ host: '127.0.0.1', port: target, noDelay: true });
    const teardown = teardownOf(client, upstream);
    client.on('error', teardown);
    upstream.on('error', teardown);
    client.on('close', teardown);
    upstream.on('close', teardown);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen({ host, port, backlog: 4096 }, resolve));
}

/**
 * Returned rather than declared as `const teardown = () => …`: tsx (esbuild keepNames) would wrap a
 * named arrow in `__name()` on every connection, a cost and a property the production build has not.
 */
function teardownOf(client: net.Socket, upstream: net.Socket): () => void {
  return () => {
    client.destroy();
    upstream.destroy();
  };
}

/**
 * The UDP half of the naive relay; sessions live until the process ends. Socket buffers are left at
 * the OS default, as the proxy's are: a bigger receive buffer here alone made the two incomparable.
 */
export async function naiveUdpRelay(host: string, port: number, target: number): Promise<void> {
  const socket = dgram.createSocket('udp4');
  const sessions = new Map<string, dgram.Socket>();
  socket.on('error', () => {});
  socket.on('message', (msg, rinfo) => {
    const key = `${rinfo.address}:${rinfo.port}`;
    let upstream = sessions.get(key);
    if (!upstream) {
      upstream = dgram.createSocket('udp4');
      upstream.on('error', () => {});
      upstream.on('message', (reply) => socket.send(reply, rinfo.port, rinfo.address));
      upstream.connect(target, '127.0.0.1');
      sessions.set(key, upstream);
      const u = upstream;
      upstream.once('connect', () => u.send(msg));
      return;
    }
    upstream.send(msg);
  });
  await new Promise<void>((resolve) => socket.bind(port, host, resolve));
}
