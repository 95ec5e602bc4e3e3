/**
 * RFC 6951 transport: one UDP socket per local (address, UDP port), shared (reference-counted) by
 * every SCTP port and association on it, each wrapped in an {@link SctpEndpoint}. The sockets come
 * from a {@link UdpSocketProvider}: node:dgram's ({@link nodeUdpSockets}, the default) or the C
 * helper's batched ones (`transport-udp-helper.ts`, `udpIo: 'helper'`).
 */
import { createSocket, type Socket } from 'node:dgram';
import { isIPv6 } from 'node:net';
import { type DatagramSocket, type EndpointSettings, SctpEndpoint } from './endpoint.js';

/** What a provider calls for one open socket. */
export interface UdpSocketEvents {
  /** A datagram from address:port (with a checksum-offloading provider: its CRC32c was right). */
  onMessage(msg: Buffer, address: string, port: number): void;
  /** A socket error, for the logs. */
  onError(message: string): void;
  /** `count` datagrams refused by the provider (bad CRC32c), the first one's source and bytes. */
  onRefused?(reason: string, count: number, head: Buffer, address: string, port: number): void;
  /** The socket is gone for good (the helper died and it could not be opened again). */
  onLost?(why: string): void;
}

/** One UDP socket of a provider. */
export interface UdpSocketHandle extends DatagramSocket {
  /** The bound local port. */
  readonly port: number;
}

/** What {@link UdpSocketProvider.open} binds. */
export interface UdpSocketOpenOptions {
  readonly address: string;
  /** 0: any free port. */
  readonly port: number;
  /** Connects the socket to this peer (sends then go to it only). */
  readonly connect?: { readonly address: string; readonly port: number };
  /** SO_RCVBUF / SO_SNDBUF asked, bytes; 0: the kernel's. */
  readonly bufferBytes: number;
}

/** Where the pool's UDP sockets come from. */
export interface UdpSocketProvider {
  /** True when the sockets check and write the SCTP checksum themselves. */
  readonly checksumOffload: boolean;
  /**
   * Binds a socket to (address, port; 0: any), connected to `connect` when given, with
   * SO_RCVBUF / SO_SNDBUF of `bufferBytes` asked (0: the kernel's).
   */
  open(o: UdpSocketOpenOptions, events: UdpSocketEvents): Promise<UdpSocketHandle>;
  /** Releases what the provider itself holds (the helper process) once its sockets are closed. */
  close?(): Promise<void>;
}

function setBuffers(socket: Socket, bytes: number): void {
  if (bytes > 0) {
    try {
      socket.setRecvBufferSize(bytes);
      socket.setSendBufferSize(bytes);
    } catch {
      // capped or refused by the kernel: the defaults stay
    }
  }
}

/** node:dgram sockets: one JavaScript callback, one Buffer and one system call per datagram. */
export const nodeUdpSockets: UdpSocketProvider = {
  checksumOffload: false,
  open(o, events) {
    const socket: Socket = createSocket({ type: isIPv6(o.address) ? 'udp6' : 'udp4' });
    return new Promise<UdpSocketHandle>((resolve, reject) => {
      const onError = (err: Error): void => {
        socket.close();
        reject(err);
      };
      socket.once('error', onError);
      socket.bind({ address: o.address, port: o.port, exclusive: true }, () => {
        const done = (): void => {
          socket.off('error', onError);
          setBuffers(socket, o.bufferBytes);
          socket.on('message', (msg, rinfo) => events.onMessage(msg, rinfo.address, rinfo.port));
          socket.on('error', (err) => events.onError(err.message));
          const port = socket.address().port;
          if (o.connect === undefined) {
            resolve(
              Object.assign(socket as unknown as DatagramSocket, { port }) as UdpSocketHandle,
            );
            return;
          }
          // A connected socket refuses an address on send: the adapter drops it (it is the peer's anyway).
          resolve({
            port,
            send: (msg, _port, _address, callback) => {
              if (callback) socket.send(msg, callback);
              else socket.send(msg);
            },
            close: (callback) => socket.close(callback),
          });
        };
        if (o.connect === undefined) done();
        else socket.connect(o.connect.port, o.connect.address, done);
      });
    });
  },
};

/** Settings of the pool. */
export interface UdpPoolSettings extends Omit<EndpointSettings, 'onIdle' | 'checksumOffload'> {
  /** SO_RCVBUF / SO_SNDBUF asked for each socket (the kernel may cap it). Default 4 MiB. */
  readonly udpBufferBytes?: number;
  /** Where the sockets come from. Default {@link nodeUdpSockets}. */
  readonly sockets?: UdpSocketProvider;
}

/** See the module comment. */
export class UdpEndpointPool {
  private readonly endpoints = new Map<string, Promise<SctpEndpoint>>();
  /** The endpoints of {@link connected}, until they go idle. */
  private readonly own = new Set<SctpEndpoint>();
  private readonly sockets: UdpSocketProvider;

  constructor(private readonly settings: UdpPoolSettings) {
    this.sockets = settings.sockets ?? nodeUdpSockets;
  }

  /**
   * The endpoint for (address, port), binding the socket on first use. The caller gets one
   * reference and must `release()` it once it registered what keeps the endpoint in use.
   */
  async acquire(address: string, port: number): Promise<SctpEndpoint> {
    const key = `${address}|${port}`;
    let p = this.endpoints.get(key);
    if (p === undefined) {
      p = this.open(address, port, undefined, key);
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
    const ep = await this.open(address, 0, { address: remoteAddress, port: remotePort }, undefined);
    ep.retain();
    return ep;
  }

  private async open(
    address: string,
    port: number,
    connect: { address: string; port: number } | undefined,
    key: string | undefined,
  ): Promise<SctpEndpoint> {
    let ep: SctpEndpoint | undefined;
    const name = (p: number): string =>
      `${address}:${p}${connect ? ` to ${connect.address}:${connect.port}` : ''}`;
    let bound = port;
    const forget = (): void => {
      if (ep === undefined) return;
      if (key === undefined) this.own.delete(ep);
      else if (this.endpoints.get(key) === opened) this.endpoints.delete(key);
    };
    let opened: Promise<SctpEndpoint> | undefined;
    const socket = await this.sockets.open(
      {
        address,
        port,
        ...(connect ? { connect } : {}),
        bufferBytes: this.settings.udpBufferBytes ?? 4 << 20,
      },
      {
        onMessage: (msg, a, p) => ep?.receive(msg, a, p),
        onError: (message) =>
          this.settings.onWarning?.(`SCTP UDP socket ${name(bound)}: ${message}`),
        onRefused: (reason, count, head, a, p) =>
          ep?.refusedByTransport(reason, 'CRC32c mismatch', count, head, a, p),
        onLost: (why) => {
          this.settings.onWarning?.(
            `SCTP UDP socket ${name(bound)} lost (${why}): its associations end`,
          );
          forget();
          void ep?.close();
        },
      },
    );
    bound = socket.port;
    ep = new SctpEndpoint(socket, address, socket.port, {
      ...this.settings,
      checksumOffload: this.sockets.checksumOffload,
      onIdle: forget,
    });
    if (key === undefined) this.own.add(ep);
    else opened = this.endpoints.get(key);
    return ep;
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
