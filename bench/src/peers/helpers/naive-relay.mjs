// The naive relay of `pnpm bench --peers`: what anyone writes in ten lines of Node, `pipe()` both
// ways per TCP connection and one dgram socket per UDP client, with none of a proxy's bookkeeping.
// Plain JavaScript run by plain `node`, so it pays neither tsx nor a build.
// usage: node naive-relay.mjs LISTEN_IP TARGET_IP TCP_PORTS UDP_PORTS   (ports comma-separated)
import dgram from 'node:dgram';
import net from 'node:net';

const [listenIp, targetIp, tcpPorts = '', udpPorts = ''] = process.argv.slice(2);
const list = (s) => s.split(',').filter(Boolean).map(Number);

for (const port of list(tcpPorts)) {
  net
    .createServer({ noDelay: true }, (client) => {
      const upstream = net.connect({ host: targetIp, port, noDelay: true });
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      for (const s of [client, upstream]) s.on('error', close).on('close', close);
      client.pipe(upstream).pipe(client);
    })
    .listen({ host: listenIp, port, backlog: 4096 });
}

for (const port of list(udpPorts)) {
  const socket = dgram.createSocket('udp4');
  const sessions = new Map();
  socket.on('message', (msg, from) => {
    const key = `${from.address}:${from.port}`;
    let upstream = sessions.get(key);
    if (!upstream) {
      upstream = dgram.createSocket('udp4');
      upstream.on('message', (reply) => socket.send(reply, from.port, from.address));
      upstream.on('error', () => {});
      sessions.set(key, upstream);
    }
    upstream.send(msg, port, targetIp);
  });
  socket.on('error', () => {});
  socket.bind(port, listenIp);
}
