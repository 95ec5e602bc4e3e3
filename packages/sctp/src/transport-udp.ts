/**
 * RFC 6951 transport: one UDP socket per local (address, UDP port), shared (reference-counted) by
 * every SCTP port and association on it, each wrapped in an {@link SctpEndpoint}.
 */
import { createSocket, type Socket } from 'node:dgram';
import { isIPv6 } from 'node:net';
import { type DatagramSocket, type EndpointSettings, SctpEndpoint } from './endpoint.js';

/** Settings of the pool. */
export interface UdpPoolSettings extends Omit<EndpointSettings, 'onIdle'> {
  /** SO_RCVBUF / SO_SNDBUF asked for each socket (the kernel may cap it). Default 4 MiB. */
  readonly udpBufferBytes?: number;
}

/** See the module comment. */
export class UdpEndpointPool {
  private readonly endpoints = new Map<string, Promise<SctpEndpoint>>();
  /** The endpoints of {@link connected}, until they go idle. */
  private readonly own = new Set<SctpEndpoint>();

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

  /**
   * An endpoint of its own for one outgoing association: a fresh socket bound to (address, any
   * port) and connected to the peer's (remoteAddress, remotePort). Not pooled; it closes once its
   * association is gone (after the idle linger), like any endpoint. The caller gets one reference.
   */
  async connected(
    address: string,
    remoteAddress: string,
    remotePort: number,
  ): Promise<SctpEndpoint> {
    const socket: Socket = createSocket({ type: isIPv6(address) ? 'udp6' : 'udp4' });
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error): void => {
        socket.close();
        reject(err);
      };
      socket.once('error', onError);
      socket.bind({ address, port: 0, exclusive: true }, () => {
        socket.connect(remotePort, remoteAddress, () => {
          socket.off('error', onError);
          resolve();
        });
      });
    });
    this.setBuffers(socket);
    // A connected socket refuses an address on send: the adapter drops it (it is the peer's anyway).
    const adapter: DatagramSocket = {
      send: (msg, _port, _address, callback) => {
        if (callback) socket.send(msg, callback);
        else socket.send(msg);
      },
      close: (callback) => socket.close(callback),
    };
    const ep: SctpEndpoint = new SctpEndpoint(adapter, address, socket.address().port, {
      ...this.settings,
      onIdle: () => this.own.delete(ep),
    });
    this.own.add(ep);
    this.wire(socket, ep, `${address}:${socket.address().port} to ${remoteAddress}:${remotePort}`);
    ep.retain();
    return ep;
  }

  private setBuffers(socket: Socket): void {
    const bytes = this.settings.udpBufferBytes ?? 4 << 20;
    if (bytes > 0) {
      try {
        socket.setRecvBufferSize(bytes);
        socket.setSendBufferSize(bytes);
      } catch {
        // capped or refused by the kernel: the defaults stay
      }
    }
  }

  private wire(socket: Socket, ep: SctpEndpoint, name: string): void {
    socket.on('message', (msg, rinfo) => ep.receive(msg, rinfo.address, rinfo.port));
    socket.on('error', (err) =>
      this.settings.onWarning?.(`SCTP UDP socket ${name}: ${err.message}`),
    );
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
        this.setBuffers(socket);
        const ep = new SctpEndpoint(socket, address, socket.address().port, {
          ...this.settings,
          onIdle: () => this.endpoints.delete(key),
        });
        this.wire(socket, ep, `${address}:${port}`);
        resolve(ep);
      });
    });
  }

  /** Every endpoint currently open. */
  async all(): Promise<SctpEndpoint[]> {
    const out: SctpEndpoint[] = [...this.own];
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
