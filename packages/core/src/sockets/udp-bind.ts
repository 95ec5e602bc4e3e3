import dgram from 'node:dgram';
import dns from 'node:dns';
import net from 'node:net';
import { DEFAULT_UDP_SERVICE_RECEIVE_BUFFER_BYTES } from './proxy-socket-options.js';

/**
 * Makes and binds a UDP Service socket (the address lookup below, the receive buffer the options
 * ask for or the Service socket's default) and resolves once it is bound.
 */
export function bindSocket(
  createSocket: ((options: dgram.SocketOptions) => dgram.Socket) | undefined,
  type: 'udp4' | 'udp6',
  address: string,
  port: number,
  bufferBytes: number,
): Promise<dgram.Socket> {
  const make = createSocket ?? dgram.createSocket;
  const lookup = createLiteralLookup();
  const socket = make(
    bufferBytes > 0
      ? { type, recvBufferSize: bufferBytes, sendBufferSize: bufferBytes, lookup }
      : { type, recvBufferSize: DEFAULT_UDP_SERVICE_RECEIVE_BUFFER_BYTES, lookup },
  );
  return new Promise((resolve, reject) => {
    const onError = (error: Error): void => {
      try {
        socket.close();
      } catch {
        // Never bound: nothing to close.
      }
      reject(error);
    };
    socket.once('error', onError);
    socket.bind({ address, port, exclusive: true }, () => {
      socket.removeListener('error', onError);
      resolve(socket);
    });
  });
}

/**
 * Makes the Service socket's address lookup. Every reply is sent to a client's address (always an
 * IP literal, from `rinfo`), and dgram resolves the address of every unconnected send: the default
 * `dns.lookup` answers an IP literal only on the next tick, so each reply paid a validation, a
 * deferred callback and a trip through the tick queue. This answers IP literals at once, and
 * remembers the last one it validated: a session's replies all go to the same `clientAddress`
 * string, so `net.isIP`'s regular expressions run once per change of client rather than once per
 * datagram. A name (never sent to here) still goes to `dns.lookup`.
 */
export function createLiteralLookup(): NonNullable<dgram.SocketOptions['lookup']> {
  let lastHost = '';
  let lastFamily = 0;
  return ((
    hostname: string,
    options: dns.LookupOneOptions,
    callback: (error: NodeJS.ErrnoException | null, address: string, family: number) => void,
  ): void => {
    if (hostname === lastHost) {
      callback(null, hostname, lastFamily);
      return;
    }
    const family = net.isIP(hostname);
    if (family === 0) {
      dns.lookup(hostname, options, callback);
      return;
    }
    lastHost = hostname;
    lastFamily = family;
    callback(null, hostname, family);
  }) as NonNullable<dgram.SocketOptions['lookup']>;
}
