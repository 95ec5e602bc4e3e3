import type dgram from 'node:dgram';
import net from 'node:net';
import { SocketOpenError, UnsupportedProtocolError } from '../errors.js';
import { joinHostPort } from '../model/service-port-name.js';
import type { AcceptPolicyFactory } from './accept-policy.js';
import type { ProxySocket, ProxySocketFactory } from './proxy-socket.js';
import { type ProxySocketOptions, resolveProxySocketOptions } from './proxy-socket-options.js';
import { TcpProxySocket } from './proxy-socket-tcp.js';
import { UdpProxySocket } from './proxy-socket-udp.js';

/** Options of {@link createProxySocketFactory}. */
export interface ProxySocketFactoryOptions extends ProxySocketOptions {
  /**
   * TCP: the accept policy of every socket (proxy now, hold, or refuse per connection), made once
   * per socket from its context. Default: proxy every connection.
   */
  acceptPolicy?: AcceptPolicyFactory;
  /**
   * How the TCP socket dials an endpoint; it must pass the given options on (they carry keep-alive,
   * no-delay and the relay's read buffers). Default `net.connect`. For tests (a blackholed
   * endpoint) and for integrators who need, say, a fixed source address.
   */
  connect?: (options: net.TcpNetConnectOpts) => net.Socket;
  /** Makes every UDP socket. Default `dgram.createSocket`. */
  createUdpSocket?: (options: dgram.SocketOptions) => dgram.Socket;
}

/**
 * Makes the factory of the default proxy sockets: TCP through `node:net`, UDP through `node:dgram`
 * (udp4 or udp6 by the family of the context's `ip`; all addresses when it is null). The protocol
 * is matched case-insensitively, as in the reference. Every socket of one factory shares its
 * options; each gets the logger, load balancer and Service port of its own context.
 *
 * The returned factory rejects with UnsupportedProtocolError for SCTP (whose message points at
 * `@userspace-proxy/sctp`) and anything else unknown, and with SocketOpenError naming
 * "ip:port/PROTOCOL" when the address is not an IP, the port is out of range, or the bind fails;
 * the bind error is its `cause`, so `cause.code === 'EADDRINUSE'` tells a port conflict apart.
 * It resolves once the socket is bound, so `addr()` is final.
 * @throws InvalidOptionError at once for a bad option.
 */
export function createProxySocketFactory(opts: ProxySocketFactoryOptions = {}): ProxySocketFactory {
  resolveProxySocketOptions(opts);
  const tcpOptions = opts;
  const udpOptions = {
    ...opts,
    ...(opts.createUdpSocket ? { createSocket: opts.createUdpSocket } : {}),
  };
  return async (context): Promise<ProxySocket> => {
    const { protocol, ip, port } = context;
    const proto = String(protocol).toUpperCase();
    if (proto !== 'TCP' && proto !== 'UDP') {
      throw new UnsupportedProtocolError(proto === 'SCTP' ? proto : String(protocol));
    }
    const what = `${joinHostPort(ip ?? '*', port)}/${proto}`;
    if (ip !== null && net.isIP(ip) === 0) {
      throw new SocketOpenError(what, { cause: new TypeError(`"${ip}" is not an IP address`) });
    }
    if (!Number.isInteger(port) || port < 0 || port > 65_535) {
      throw new SocketOpenError(what, { cause: new RangeError(`port ${port} is out of range`) });
    }
    try {
      return proto === 'TCP'
        ? await TcpProxySocket.open(context, tcpOptions)
        : await UdpProxySocket.open(context, udpOptions);
    } catch (error) {
      throw new SocketOpenError(what, { cause: error });
    }
  };
}

/** The default factory, with every option at its default. */
export const newProxySocket: ProxySocketFactory = createProxySocketFactory();
