/**
 * A {@link ForeignStack} for `werift-sctp` 0.0.11 (devDependency, test support only). One `SCTP`
 * instance per association over a `Transport` that hands packets to the foreign engine; an accepted
 * association is `SCTP.server` with the remote port read from the INIT (werift needs it in advance).
 * Packets go to `handleData` directly, so its rejections (a bad checksum) are caught per
 * association instead of becoming an unhandled rejection. Sends are issued one at a time: werift
 * slows to a crawl with many unawaited sends (findings §1). werift has no graceful-shutdown call:
 * `stop()` sends an ABORT, and the suite records that.
 */
import { SCTP, SCTP_STATE } from 'werift-sctp';
import { ChunkType } from '../chunk-types.js';
import type { SctpOutboundMessage } from '../index.js';
import type { ForeignDriver, ForeignHost, ForeignStack } from './engine-foreign.js';

interface WeriftInternals {
  handleData(data: Buffer): Promise<void>;
  _outboundStreamsCount: number;
  _inboundStreamsCount: number;
}

class WeriftDriver implements ForeignDriver {
  private readonly sctp: SCTP;
  private readonly queue: SctpOutboundMessage[] = [];
  private sending = false;
  private established = false;
  private lastSeen = -1;
  private local = false;

  constructor(
    private readonly host: ForeignHost,
    localPort: number,
    remotePort: number,
    server: boolean,
  ) {
    const transport = {
      send: async (buf: Buffer) => host.output(buf),
      close: () => {},
    };
    this.sctp = server ? SCTP.server(transport, localPort) : SCTP.client(transport, localPort);
    this.sctp.setRemotePort(remotePort);
    this.sctp.stateChanged.connected.subscribe(() => {
      this.established = true;
      const i = this.sctp as unknown as WeriftInternals;
      host.established(i._outboundStreamsCount, i._inboundStreamsCount);
      this.pump();
    });
    this.sctp.stateChanged.closed.subscribe(() => {
      if (this.local) return;
      if (!this.established) host.closed('connect-failed', 'werift closed before COOKIE ACK');
      else if (this.lastSeen === ChunkType.ABORT) host.closed('abort-remote', 'ABORT received');
      else if (
        this.lastSeen === ChunkType.SHUTDOWN_COMPLETE ||
        this.lastSeen === ChunkType.SHUTDOWN_ACK
      )
        host.closed('shutdown', 'werift closed after the shutdown');
      else
        host.closed('timeout', `werift closed in state ${SCTP_STATE[this.sctp.associationState]}`);
    });
    this.sctp.onReceive.subscribe((streamId, ppid, data) =>
      host.message({ streamId, ppid, unordered: false, data }),
    );
    void this.sctp.start(remotePort);
  }

  input(packet: Buffer): Promise<void> {
    if (packet.length > 12) this.lastSeen = packet[12] as number;
    return (this.sctp as unknown as WeriftInternals).handleData(packet);
  }

  send(m: SctpOutboundMessage): void {
    this.queue.push(m);
    this.pump();
  }

  private pump(): void {
    if (this.sending || !this.established) return;
    const m = this.queue.shift();
    if (m === undefined) return;
    this.sending = true;
    this.sctp.send(m.streamId ?? 0, m.ppid ?? 0, m.data, { ordered: !m.unordered }).then(
      () => {
        this.sending = false;
        this.host.sent(m.data.length);
        this.pump();
      },
      (err: unknown) => {
        this.sending = false;
        this.host.closed('internal-error', `werift send failed: ${String(err).slice(0, 200)}`);
      },
    );
  }

  shutdown(): void {
    // No SHUTDOWN primitive: stop() is an ABORT.
    this.local = true;
    void this.sctp.stop().then(() => this.host.closed('abort-local', 'werift stop() sends ABORT'));
  }

  abort(): void {
    this.local = true;
    void this.sctp.stop();
  }
}

/** werift-sctp 0.0.11 behind the foreign engine. */
export const weriftStack: ForeignStack = {
  name: 'werift-sctp 0.0.11',
  client: (host, localPort, remotePort) => new WeriftDriver(host, localPort, remotePort, false),
  server: (host, localPort, remotePort) => new WeriftDriver(host, localPort, remotePort, true),
};
