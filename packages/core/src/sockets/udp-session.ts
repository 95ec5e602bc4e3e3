import dgram from 'node:dgram';
import type { SilenceWheel, Silent } from './silence-wheel.js';

/** Datagrams a session queues while its upstream socket is still binding; more are dropped. */
export const MAX_PENDING_DATAGRAMS = 64;
/** Bytes a session queues while its upstream socket is still binding; more are dropped. */
export const MAX_PENDING_BYTES = 256 * 1024;

/**
 * Why a session ended: silent for its timeout, the socket closed, an upstream error, or its
 * endpoint left the Service port's endpoints.
 */
export type UdpSessionEndReason = 'idle' | 'closed' | 'error' | 'endpoint-removed';

/** What a session reports to the proxy socket that owns it. */
export interface UdpSessionOwner {
  /** A datagram came back from the endpoint: send it to the client from the Service's socket. */
  reply(session: UdpSession, datagram: Buffer): void;
  /** The upstream socket could not be opened or connected (the UDP "dial" failed). */
  dialFailed(session: UdpSession, error: Error): void;
  /** The session ended; called exactly once. */
  ended(session: UdpSession, reason: UdpSessionEndReason, error?: Error): void;
}

/** What a {@link UdpSession} is made from. */
export interface UdpSessionParams {
  clientAddress: string;
  clientPort: number;
  /** The client's key in `activeClients`, "ip:port". */
  client: string;
  /** The endpoint, "ip:port", as the load balancer returned it. */
  endpoint: string;
  host: string;
  port: number;
  type: 'udp4' | 'udp6';
  /** Receive and send buffer size of the upstream socket; 0 keeps the OS default. */
  bufferBytes: number;
  owner: UdpSessionOwner;
  /** Default `dgram.createSocket`. */
  createSocket?: (options: dgram.SocketOptions) => dgram.Socket;
}

/**
 * One UDP client ("ip:port") of one Service port: a connected upstream socket to the endpoint
 * picked for it, with an ephemeral source port, as in the reference. The owner's idle wheel ends it
 * after a silent timeout (through `lastActive` and `expire`); the session relays and counts.
 */
export class UdpSession implements Silent {
  readonly clientAddress: string;
  readonly clientPort: number;
  readonly client: string;
  readonly endpoint: string;
  /**
   * `performance.now()` when the session joined its idle wheel, then at the first tick after a datagram
   * either way (the owner sets {@link touched} per datagram instead of reading the clock).
   */
  lastActive = 0;
  /** Set by the owner on every datagram either way; the idle wheel's tick stamps `lastActive`. */
  touched = false;
  /** Datagrams and bytes from the client to the endpoint. */
  datagramsIn = 0;
  bytesIn = 0;
  /** Datagrams and bytes from the endpoint to the client. */
  datagramsOut = 0;
  bytesOut = 0;
  /** Datagrams dropped because the queue filled while the upstream socket was binding. */
  droppedWhileConnecting = 0;
  readonly #params: UdpSessionParams;
  #socket: dgram.Socket | undefined;
  #state: 'new' | 'connecting' | 'open' | 'closed' = 'new';
  #pending: Buffer[] = [];
  #pendingBytes = 0;

  constructor(params: UdpSessionParams) {
    this.#params = params;
    this.clientAddress = params.clientAddress;
    this.clientPort = params.clientPort;
    this.client = params.client;
    this.endpoint = params.endpoint;
  }

  /** True until the session has ended. */
  get open(): boolean {
    return this.#state !== 'closed';
  }

  /** Opens and connects the upstream socket; datagrams sent meanwhile are queued. */
  start(): void {
    if (this.#state !== 'new') return;
    this.#state = 'connecting';
    const { createSocket = dgram.createSocket, type, bufferBytes, port, host } = this.#params;
    try {
      const socket = createSocket(
        bufferBytes > 0
          ? { type, recvBufferSize: bufferBytes, sendBufferSize: bufferBytes }
          : { type },
      );
      this.#socket = socket;
      socket.on('error', this.#onError);
      socket.on('message', this.#onMessage);
      socket.connect(port, host, this.#onConnect);
    } catch (error) {
      this.#onError(error instanceof Error ? error : new Error(String(error)));
    }
  }

  /** Relays one datagram from the client, or queues it while the upstream socket binds. */
  send(datagram: Buffer): void {
    if (this.#state === 'open') {
      this.datagramsIn++;
      this.bytesIn += datagram.length;
      // No callback: a failed send is a lost datagram, which UDP allows; it must not throw here.
      (this.#socket as dgram.Socket).send(datagram);
      return;
    }
    if (this.#state !== 'connecting' && this.#state !== 'new') return;
    if (
      this.#pending.length >= MAX_PENDING_DATAGRAMS ||
      this.#pendingBytes + datagram.length > MAX_PENDING_BYTES
    ) {
      this.droppedWhileConnecting++;
      return;
    }
    this.#pending.push(datagram);
    this.#pendingBytes += datagram.length;
  }

  /** Ends the session: closes the upstream socket and tells the owner. Idempotent. */
  /** Called by the idle wheel once the session has been silent for its timeout. */
  expire(_wheel: SilenceWheel): void {
    this.close('idle');
  }

  close(reason: UdpSessionEndReason, error?: Error): void {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    this.#pending = [];
    this.#pendingBytes = 0;
    try {
      this.#socket?.close();
    } catch {
      // Already closed by a failed bind: nothing left to release.
    }
    this.#params.owner.ended(this, reason, error);
  }

  readonly #onConnect = (error?: Error | null): void => {
    if (error) {
      this.#onError(error);
      return;
    }
    if (this.#state !== 'connecting') return;
    this.#state = 'open';
    const queued = this.#pending;
    this.#pending = [];
    this.#pendingBytes = 0;
    for (const datagram of queued) this.send(datagram);
  };

  readonly #onMessage = (datagram: Buffer): void => {
    if (this.#state !== 'open') return;
    this.datagramsOut++;
    this.bytesOut += datagram.length;
    this.#params.owner.reply(this, datagram);
  };

  /**
   * A bind/connect failure is a failed dial; a later error (ICMP port unreachable reported as
   * ECONNREFUSED, for an endpoint that went away) ends the session, as a read error did in the
   * reference, so the client's next datagram picks an endpoint afresh.
   */
  readonly #onError = (error: Error): void => {
    if (this.#state === 'closed') return;
    if (this.#state !== 'open') this.#params.owner.dialFailed(this, error);
    this.close('error', error);
  };
}
