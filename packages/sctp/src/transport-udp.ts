/**
 * RFC 6951 transport: one UDP socket per local (address, UDP port), shared (reference-counted) by
 * every SCTP port and association on it, each wrapped in an {@link SctpEndpoint}.
 */
import { createSocket, type Socket } from 'node:dgram';
import { isIPv6 } from 'node:net';
import { type EndpointSettings, SctpEndpoint } from './endpoint.js';

/** Settings of the pool. */
export interface UdpPoolSettings extends Omit<EndpointSettings, 'onIdle'> {
  /** SO_RCVBUF / SO_SNDBUF asked for each socket (the kernel may cap it). Default 4 MiB. */
  readonly udpBufferBytes?: number;
}

/** See the module comment. */
export class UdpEndpointPool {
  private readonly endpoints = new Map<string, Promise<SctpEndpoint>>();

  constructor(private readonly settings: UdpPoolSettings) {}

  /**
   * The endpoint for (address, port), binding the socket on first use. The caller gets one
   * reference and must `release()` it once it registered what keeps the endpoint in use.
   */
  async acquire(address: string, port: number): Promise<SctpEndpoint> {
    const key = `${address}|${port}`;
    let p = this.endpoints.get(key);
    if (p === undefined) {
      p = this.open(address, port, key);
      this.endpoints.set(key, p);
      p.catch(() => {
        if (this.endpoints.get(key) === p) this.endpoints.delete(key);
      });
    }
    const ep = await p;
    ep.retain();
    return ep;
  }

  private open(address: string, port: number, key: string): Promise<SctpEndpoint> {
    const socket: Socket = createSocket({ type: isIPv6(address) ? 'udp6' : 'udp4' });
    return new Promise<SctpEndpoint>((resolve, reject) => {
      const onError = (err: Error): void => {
        socket.close();
        reject(err);
      };
      socket.once('error', onError);
      socket.bind({ address, port, exclusive: true }, () => {
        socket.off('error', onError);
        const bytes = this.settings.udpBufferBytes ?? 4 << 20;
        if (bytes > 0) {
          try {
            socket.setRecvBufferSize(bytes);
            socket.setSendBufferSize(bytes);
          } catch {
            // capped or refused by the kernel: the defaults stay
          }
        }
        const ep = new SctpEndpoint(socket, address, socket.address().port, {
          ...this.settings,
          onIdle: () => this.endpoints.delete(key),
        });
        socket.on('message', (msg, rinfo) => ep.receive(msg, rinfo.address, rinfo.port));
        socket.on('error', (err) =>
          this.settings.onWarning?.(`SCTP UDP socket ${address}:${port}: ${err.message}`),
        );
        resolve(ep);
      });
    });
  }

  /** Every endpoint currently open. */
  async all(): Promise<SctpEndpoint[]> {
    const out: SctpEndpoint[] = [];
    for (const p of this.endpoints.values()) {
      try {
        out.push(await p);
      } catch {
        // failed to bind: nothing to close
      }
    }
    return out;
  }
}
