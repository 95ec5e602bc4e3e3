import type dgram from 'node:dgram';
import {
  type AcceptPolicyFactory,
  createProxySocketFactory,
  type ProxySocket,
  type ProxySocketFactory,
  type ProxySocketFactoryOptions,
  SocketOpenError,
  UnsupportedProtocolError,
} from '@userspace-proxy/core';
import { joinHostPort } from '@userspace-proxy/core/sockets';
import type { Idler } from './idler.js';
import { IdlingUdpProxySocket } from './idling-udp-socket.js';

/** Options of {@link createIdlingProxySocketFactory}. */
export interface IdlingProxySocketFactoryOptions
  extends Omit<ProxySocketFactoryOptions, 'acceptPolicy'> {
  /** The shared state of the proxy's idling sockets (bounds, budget, NeedPods, counters). */
  idler: Idler;
  /**
   * Serves what the idler does not (SCTP: `@userspace-proxy/sctp`'s factory). Default: none, and
   * such a protocol is refused with UnsupportedProtocolError.
   */
  base?: ProxySocketFactory;
  /**
   * Makes the TCP factory from the idler's accept policy: any factory that implements core's
   * `acceptPolicy` contract, such as `@userspace-proxy/native`'s
   * `withNativeTcp(...).withAcceptPolicy`, whose helper holds the clients and hands them over at a
   * fraction of Node's cost per client. Default: core's TCP socket with this factory's socket
   * options (which such a factory then does not see: it takes its own).
   */
  tcp?: (acceptPolicy: AcceptPolicyFactory) => ProxySocketFactory;
}

/**
 * The socket factory of an idling proxier: TCP through core's socket (or the `tcp` option's) with the
 * Idler's accept policy (hold while no endpoints, hand over when they come), UDP through
 * {@link IdlingUdpProxySocket} (drop or buffer while no endpoints, NeedPods per burst), anything
 * else through `base`. The socket options (dial timeouts, hold buffer, UDP sessions…) are core's.
 * @throws InvalidOptionError at once for a bad socket option.
 */
export function createIdlingProxySocketFactory(
  options: IdlingProxySocketFactoryOptions,
): ProxySocketFactory {
  const { idler, base, tcp: makeTcp, ...socketOptions } = options;
  // Core's factory checks every socket option as it is made. With `tcp` the options still serve
  // the UDP sockets, so they are checked the same way (and the factory made for it dropped).
  const coreTcp = createProxySocketFactory({ ...socketOptions, acceptPolicy: idler.acceptPolicy });
  const tcp = makeTcp === undefined ? coreTcp : makeTcp(idler.acceptPolicy);
  const udpOptions = {
    ...socketOptions,
    ...(socketOptions.createUdpSocket === undefined
      ? {}
      : {
          createSocket: socketOptions.createUdpSocket as (o: dgram.SocketOptions) => dgram.Socket,
        }),
  };
  return async (context): Promise<ProxySocket> => {
    const protocol = String(context.protocol).toUpperCase();
    if (protocol === 'TCP') return tcp(context);
    if (protocol === 'UDP') {
      // The address checks and the error shape are core's: its TCP factory path is not reused
      // for UDP, so the same wrapping is done here.
      try {
        return await IdlingUdpProxySocket.open(context, idler, udpOptions);
      } catch (error) {
        throw new SocketOpenError(`${joinHostPort(context.ip ?? '*', context.port)}/UDP`, {
          cause: error,
        });
      }
    }
    if (base !== undefined) return base(context);
    throw new UnsupportedProtocolError(String(context.protocol));
  };
}
