import dgram from 'node:dgram';
import type { Addr, ProxySocket, ProxySocketContext, ServiceInfo } from '@userspace-proxy/core';
import { UdpProxySocket, type UdpProxySocketOptions } from '@userspace-proxy/core/sockets';
import type { Idler } from './idler.js';
import type { GatedDatagramSocket, UdpGate } from './udp-gate.js';

/** `dgram.Socket`'s constructor takes the options `dgram.createSocket` does (its typings omit it). */
const DgramSocket = dgram.Socket as unknown as new (options: dgram.SocketOptions) => dgram.Socket;

/**
 * The Service's own dgram socket, with a gate in front of its `message` event: what the gate takes
 * is never seen by core's UDP socket, and `deliver` hands it over later as if it had just arrived.
 */
class GatedSocket extends DgramSocket implements GatedDatagramSocket {
  gate: ((datagram: Buffer, rinfo: dgram.RemoteInfo) => boolean) | undefined;

  override emit(event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'message' && this.gate !== undefined) {
      if (!this.gate(args[0] as Buffer, args[1] as dgram.RemoteInfo)) return false;
    }
    return super.emit(event, ...args);
  }

  deliver(datagram: Buffer, rinfo: dgram.RemoteInfo): void {
    super.emit('message', datagram, rinfo);
  }
}

/**
 * The idling UDP socket: core's `UdpProxySocket` (sessions, limits, idle wheel and all), opened at
 * once on a Service socket whose datagrams pass a {@link UdpGate} first. While the Service port has
 * no endpoints the gate drops them (or buffers a few) and asks for pods once per burst; once it has,
 * they flow to core's socket untouched, and the buffered ones are replayed. Chosen over opening
 * core's socket only when endpoints come because it binds once (no gap in which the port is closed
 * and a datagram gets an ICMP port-unreachable) and can replay with the client's own address.
 *
 * The gate is put on the sockets core's socket creates while it opens (the Service socket; a
 * failed IPv6 attempt is one more), through the public `createSocket` option; the session sockets
 * it creates later are plain ones.
 */
export class IdlingUdpProxySocket implements ProxySocket {
  readonly #inner: UdpProxySocket;
  readonly #gate: UdpGate;
  readonly #context: ProxySocketContext;
  readonly #socket: GatedSocket;
  #closed = false;

  /** Opens core's UDP socket behind the gate of `context`'s Service port. */
  static async open(
    context: ProxySocketContext,
    idler: Idler,
    options: UdpProxySocketOptions = {},
  ): Promise<IdlingUdpProxySocket> {
    const create = options.createSocket ?? dgram.createSocket;
    let opening = true;
    const gated: GatedSocket[] = [];
    const inner = await UdpProxySocket.open(context, {
      ...options,
      createSocket: (socketOptions) => {
        if (!opening) return create(socketOptions);
        const socket = new GatedSocket(socketOptions);
        gated.push(socket);
        return socket;
      },
    });
    opening = false;
    const socket = gated.at(-1);
    if (socket === undefined) {
      await inner.close();
      throw new Error('the UDP socket was opened without the idler seeing its Service socket');
    }
    return new IdlingUdpProxySocket(context, idler.udpGate(context), inner, socket);
  }

  private constructor(
    context: ProxySocketContext,
    gate: UdpGate,
    inner: UdpProxySocket,
    socket: GatedSocket,
  ) {
    this.#context = context;
    this.#gate = gate;
    this.#inner = inner;
    this.#socket = socket;
    gate.attach(context);
    socket.gate = (datagram, rinfo) => gate.admit(socket, datagram, rinfo);
  }

  addr(): Addr {
    return this.#inner.addr();
  }

  listenPort(): number {
    return this.#inner.listenPort();
  }

  proxyLoop(info: ServiceInfo): Promise<void> {
    return this.#inner.proxyLoop(info);
  }

  close(): Promise<void> {
    if (!this.#closed) {
      this.#closed = true;
      this.#socket.gate = undefined;
      this.#gate.detach(this.#context, this.#socket);
    }
    return this.#inner.close();
  }

  activeConnections(): number {
    return this.#inner.activeConnections();
  }

  idle(): Promise<void> {
    return this.#inner.idle();
  }
}
