import type net from 'node:net';
import { startTcpServer, type TcpTestServer } from './echo-servers.js';

/**
 * A backend that speaks the PROXY protocol as a receiver would: it parses a v1 or v2 header off the
 * front of each connection (written from the spec's byte layouts, independently of the encoder in
 * sockets/proxy-protocol.ts), records it, and echoes every byte after it.
 */
export interface ParsedProxyHeader {
  version: 1 | 2;
  /** v1: "TCP4", "TCP6", "UNKNOWN"; v2: "TCP4", "TCP6", "UDP4", "UDP6", "UNSPEC". */
  family: string;
  /** v2 only: "PROXY" or "LOCAL". */
  command?: string;
  src?: { address: string; port: number };
  dst?: { address: string; port: number };
  /** The header's bytes as received. */
  raw: Buffer;
}

const SIGNATURE = Buffer.from('0d0a0d0a000d0a515549540a', 'hex');

/** An IPv6 address from 16 bytes, in the compressed form Node reports (`::1`). */
function ipv6(bytes: Buffer): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(bytes.readUInt16BE(i).toString(16));
  return new URL(`http://[${groups.join(':')}]/`).hostname.slice(1, -1);
}

/**
 * Parses one header at the start of `data`: the header and how many bytes it took, 'more' when
 * `data` is too short to tell, or an Error for bytes that are no header.
 */
export function parseProxyHeader(
  data: Buffer,
): { header: ParsedProxyHeader; length: number } | 'more' | Error {
  if (data.length < SIGNATURE.length && SIGNATURE.subarray(0, data.length).equals(data))
    return 'more';
  if (data.subarray(0, SIGNATURE.length).equals(SIGNATURE)) {
    if (data.length < 16) return 'more';
    const verCmd = data[12] as number;
    const fam = data[13] as number;
    const len = data.readUInt16BE(14);
    if (data.length < 16 + len) return 'more';
    if (verCmd >> 4 !== 2) return new Error(`bad version ${verCmd >> 4}`);
    const command = (verCmd & 0xf) === 1 ? 'PROXY' : (verCmd & 0xf) === 0 ? 'LOCAL' : '?';
    const body = data.subarray(16, 16 + len);
    const raw = Buffer.from(data.subarray(0, 16 + len));
    const transport = (fam & 0xf) === 1 ? 'TCP' : (fam & 0xf) === 2 ? 'UDP' : '?';
    if (fam >> 4 === 1 && len >= 12) {
      const v4 = (at: number) => [...body.subarray(at, at + 4)].join('.');
      return {
        header: {
          version: 2,
          family: `${transport}4`,
          command,
          src: { address: v4(0), port: body.readUInt16BE(8) },
          dst: { address: v4(4), port: body.readUInt16BE(10) },
          raw,
        },
        length: 16 + len,
      };
    }
    if (fam >> 4 === 2 && len >= 36) {
      return {
        header: {
          version: 2,
          family: `${transport}6`,
          command,
          src: { address: ipv6(body.subarray(0, 16)), port: body.readUInt16BE(32) },
          dst: { address: ipv6(body.subarray(16, 32)), port: body.readUInt16BE(34) },
          raw,
        },
        length: 16 + len,
      };
    }
    return { header: { version: 2, family: 'UNSPEC', command, raw }, length: 16 + len };
  }
  const prefix = 'PROXY '.slice(0, Math.min(6, data.length));
  if (data.toString('latin1', 0, prefix.length) !== prefix) return new Error('not a PROXY header');
  const end = data.indexOf('\r\n');
  if (end < 0) return data.length > 107 ? new Error('v1 header too long') : 'more';
  const line = data.toString('latin1', 0, end);
  const parts = line.split(' ');
  const raw = Buffer.from(data.subarray(0, end + 2));
  if (parts[1] === 'UNKNOWN')
    return { header: { version: 1, family: 'UNKNOWN', raw }, length: end + 2 };
  if (parts.length !== 6 || (parts[1] !== 'TCP4' && parts[1] !== 'TCP6')) {
    return new Error(`bad v1 header ${JSON.stringify(line)}`);
  }
  return {
    header: {
      version: 1,
      family: parts[1],
      src: { address: parts[2] as string, port: Number(parts[4]) },
      dst: { address: parts[3] as string, port: Number(parts[5]) },
      raw,
    },
    length: end + 2,
  };
}

/** A TCP test server whose connections each start with a PROXY header. */
export interface ProxyProtocolServer extends TcpTestServer {
  /** The header of each connection, in accept order (an Error for a connection without one). */
  readonly headers: (ParsedProxyHeader | Error)[];
}

/** Starts a backend on `host` that parses each connection's header, then echoes what follows. */
export async function startProxyProtocolServer(host = '127.0.0.1'): Promise<ProxyProtocolServer> {
  const headers: (ParsedProxyHeader | Error)[] = [];
  const server = await startTcpServer({
    host,
    onConnection: (socket: net.Socket) => {
      let pending = Buffer.alloc(0);
      const onData = (chunk: Buffer): void => {
        pending = Buffer.concat([pending, chunk]);
        const parsed = parseProxyHeader(pending);
        if (parsed === 'more') return;
        socket.removeListener('data', onData);
        if (parsed instanceof Error) {
          headers.push(parsed);
          socket.destroy();
          return;
        }
        headers.push(parsed.header);
        const rest = pending.subarray(parsed.length);
        if (rest.length > 0) socket.write(rest);
        socket.pipe(socket);
      };
      socket.on('data', onData);
    },
  });
  return Object.assign(server, { headers });
}
