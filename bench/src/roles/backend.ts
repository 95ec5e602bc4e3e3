import dgram from 'node:dgram';
import net from 'node:net';
import { processStats } from '../rpc.js';

/** The ports of the backend servers, all on 127.0.0.1. */
export interface BackendPorts {
  tcpSink: number;
  tcpEcho: number;
  tcpHttp: number;
  udpSink: number;
  udpEcho: number;
}

const RESPONSE = Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok');
let udpReceived = 0;
let udpBytes = 0;

function listenTcp(onConnection: (s: net.Socket) => void): Promise<number> {
  const server = net.createServer({ noDelay: true }, onConnection);
  server.on('error', () => {});
  return new Promise((resolve) =>
    server.listen({ host: '127.0.0.1', port: 0, backlog: 4096 }, () =>
      resolve((server.address() as net.AddressInfo).port),
    ),
  );
}

function listenUdp(
  onMessage: (socket: dgram.Socket, msg: Buffer, rinfo: dgram.RemoteInfo) => void,
) {
  const socket = dgram.createSocket({ type: 'udp4', recvBufferSize: 4 << 20 });
  socket.on('message', (msg, rinfo) => onMessage(socket, msg, rinfo));
  socket.on('error', () => {});
  return new Promise<number>((resolve) =>
    socket.bind(0, '127.0.0.1', () => resolve(socket.address().port)),
  );
}

/** Starts every backend server once. */
async function start(): Promise<BackendPorts> {
  const tcpSink = await listenTcp((s) => {
    s.on('data', () => {});
    s.on('error', () => {});
  });
  const tcpEcho = await listenTcp((s) => {
    s.on('error', () => {});
    s.pipe(s);
  });
  const tcpHttp = await listenTcp((s) => {
    s.on('error', () => {});
    let seen = '';
    s.on('data', (chunk) => {
      seen += chunk.toString('latin1');
      if (seen.includes('\r\n\r\n')) {
        seen = '';
        s.end(RESPONSE);
      }
    });
  });
  const udpSink = await listenUdp((_s, msg) => {
    udpReceived++;
    udpBytes += msg.length;
  });
  const udpEcho = await listenUdp((s, msg, rinfo) => s.send(msg, rinfo.port, rinfo.address));
  return { tcpSink, tcpEcho, tcpHttp, udpSink, udpEcho };
}

/** The methods the orchestrator calls on the backend process. */
export const backendMethods = {
  start,
  udpCount: () => ({ datagrams: udpReceived, bytes: udpBytes }),
  resetUdp: () => {
    udpReceived = 0;
    udpBytes = 0;
  },
  stats: processStats,
};
