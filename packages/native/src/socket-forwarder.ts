import type net from 'node:net';
import type { Logger } from '@userspace-proxy/core';
import { NativeHelperError } from './errors.js';
import type { EngineSocket, NativeConnection } from './native-connection.js';
import type { CloseHow } from './relay-protocol.js';

/**
 * What the engine calls for one listener: the socket once it exists; until then accepts wait in
 * `early` (an accept policy sees none before the socket exists). A class, so its methods are
 * shared: a daemon with 10 000 listeners holds no closures per listener.
 */
export class SocketForwarder implements EngineSocket {
  /** The listener's socket, once it exists. */
  socket: EngineSocket | undefined;
  /** Connections accepted before it existed. */
  early: NativeConnection[] | undefined;
  readonly logger: Logger;

  constructor(logger: Logger) {
    this.logger = logger;
  }

  onAccepted(c: NativeConnection): void {
    if (this.socket !== undefined) this.socket.onAccepted(c);
    else if (this.early !== undefined) this.early.push(c);
    else this.early = [c];
  }
  onClosed(c: NativeConnection, how: CloseHow): void {
    this.socket?.onClosed(c, how);
  }
  onRefusedAtCap(): void {
    this.socket?.onRefusedAtCap();
  }
  onAcceptError(e: NodeJS.ErrnoException): void {
    this.socket?.onAcceptError(e);
  }
  onHelperExit(e: NativeHelperError): void {
    this.socket?.onHelperExit(e);
  }
  onRelisten(e: unknown, attempt?: number): void {
    this.socket?.onRelisten(e, attempt);
  }
  onPickDialed(c: NativeConnection, errno: number): void {
    this.socket?.onPickDialed(c, errno);
  }
  onPicksTaken(thread: number, epoch: number): void {
    this.socket?.onPicksTaken(thread, epoch);
  }
  handOver(c: NativeConnection): void {
    this.socket?.handOver(c);
  }
  dialAttempt(c: NativeConnection, target: { host: string; port: number }): net.Socket {
    if (this.socket === undefined) throw new NativeHelperError('no socket for this listener yet');
    return this.socket.dialAttempt(c, target);
  }
  dialDone(c: NativeConnection, error: unknown, connected: boolean): void {
    this.socket?.dialDone(c, error, connected);
  }
  refuseConnection(c: NativeConnection, reason: string): void {
    this.socket?.refuseConnection(c, reason);
  }
}
