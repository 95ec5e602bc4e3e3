/**
 * A {@link ForeignStack} for npm `sctp` 1.0.0 (devDependency, test support only). It has no UDP
 * server mode, so every association, accepted ones too, is one `sctp.Socket` over a UDP-like object
 * of its own (what the package calls `udpTransport`): accepted ones `passive` with the remote port
 * read from the INIT, as the findings did. Messages go through `association.SEND` one at a time
 * (its callback is its backpressure) so the stream id, PPID and U bit can be set; received ones
 * come from the socket's per-stream readables (which carry `ppid`, not the U bit).
 */
import { EventEmitter } from 'node:events';
import sctp from 'sctp';
import { ChunkType } from '../chunk-types.js';
import type { SctpOutboundMessage } from '../index.js';
import type { ForeignDriver, ForeignHost, ForeignStack } from './engine-foreign.js';

/** What npm `sctp` takes as `udpTransport` when it is not a dgram.Socket. */
class PeerLink extends EventEmitter {
  constructor(private readonly host: ForeignHost) {
    super();
  }
  send(buf: Buffer, _port: number, _address: string, cb?: () => void): void {
    this.host.output(Buffer.from(buf));
    cb?.();
  }
}

// The UDP header comes off the 1 500-byte MTU (the package's default sends 1 504-byte datagrams).
sctp.defaults({ PMTU: 1472 });

const RECEIVE_WINDOW = 1 << 20;

class NpmSctpDriver implements ForeignDriver {
  private readonly link: PeerLink;
  private readonly socket: sctp.Socket;
  private readonly queue: SctpOutboundMessage[] = [];
  private sending = false;
  private established = false;
  private sawAbort = false;
  private done = false;

  constructor(
    private readonly host: ForeignHost,
    localPort: number,
    remotePort: number,
    passive: boolean,
  ) {
    this.link = new PeerLink(host);
    // The readable high-water mark is the advertised a_rwnd: the default 16 KiB deadlocks larger messages.
    this.socket = new sctp.Socket({ readableHighWaterMark: RECEIVE_WINDOW });
    this.socket.on('error', () => {});
    this.socket.on('stream', (readable, streamId) => {
      readable.on('data', (data: Buffer & { ppid?: number }) =>
        host.message({ streamId, ppid: data.ppid ?? 0, unordered: false, data }),
      );
    });
    this.socket.resume(); // the same data also arrives on the socket itself
    this.socket.on('connect', () => {
      this.established = true;
      const a = this.socket.association;
      a?.once('SHUTDOWN COMPLETE', () => this.close('shutdown', 'SHUTDOWN COMPLETE'));
      a?.once('COMMUNICATION LOST', (event: string) =>
        this.close(
          event === 'abort' || this.sawAbort ? 'abort-remote' : 'timeout',
          `COMMUNICATION LOST (${event})`,
        ),
      );
      host.established(this.socket.OS, this.socket.MIS);
    });
    this.socket.on('end', () => this.close(this.sawAbort ? 'abort-remote' : 'shutdown', 'end'));
    this.socket.connect({
      port: remotePort,
      localPort,
      passive,
      udpTransport: this.link,
      udpPeer: { address: '0.0.0.0', port: 1 },
      MIS: 1024,
      OS: 1024,
    });
  }

  private close(reason: 'shutdown' | 'abort-remote' | 'timeout', detail: string): void {
    if (this.done) return;
    this.done = true;
    this.host.closed(reason, detail);
  }

  input(packet: Buffer): void {
    if (packet.length > 12 && packet[12] === ChunkType.ABORT) this.sawAbort = true;
    this.link.emit('message', packet, { address: '0.0.0.0', port: 1, size: packet.length });
  }

  send(m: SctpOutboundMessage): void {
    this.queue.push(m);
    this.pump();
  }

  private pump(): void {
    if (this.sending) return;
    const m = this.queue.shift();
    const a = this.socket.association;
    if (m === undefined || a === undefined) return;
    this.sending = true;
    a.SEND(
      m.data,
      { stream_id: m.streamId ?? 0, ppid: m.ppid ?? 0, unordered: m.unordered ?? false },
      () => {
        this.sending = false;
        this.host.sent(m.data.length);
        // Not from inside its callback: a SEND issued there is never completed.
        setImmediate(() => this.pump());
      },
    );
  }

  shutdown(): void {
    this.socket.association?.SHUTDOWN();
  }

  abort(): void {
    this.done = true;
    this.socket.association?.ABORT();
  }
}

/** npm `sctp` 1.0.0 behind the foreign engine. */
export const npmSctpStack: ForeignStack = {
  name: 'sctp 1.0.0',
  client: (host, localPort, remotePort) => new NpmSctpDriver(host, localPort, remotePort, false),
  server: (host, localPort, remotePort) => new NpmSctpDriver(host, localPort, remotePort, true),
};
