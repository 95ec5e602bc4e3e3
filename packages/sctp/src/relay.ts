/**
 * Relays messages between two associations (the proxy's client side and endpoint side), keeping
 * stream id, PPID, the U bit and boundaries. Backpressure crosses over: when one side's `send`
 * returns false the other side's delivery is paused until 'drain', so its receive window closes
 * and its peer slows down instead of the proxy buffering. A graceful SHUTDOWN on one side becomes a
 * graceful shutdown of the other once everything before it was handed over; an abnormal close on
 * one side aborts the other.
 */
import type { SctpCloseInfo, SctpMessage } from './association-types.js';
import type { SctpAssociation } from './engine.js';

/** Totals of one relay. */
export interface SctpRelayCounters {
  messagesToEndpoint: number;
  messagesToClient: number;
  bytesToEndpoint: number;
  bytesToClient: number;
  /**
   * Messages that arrived after the other side began its shutdown: SCTP has no half-close, so an
   * association that received SHUTDOWN accepts nothing more to send, and they are dropped.
   */
  droppedAfterShutdown: number;
}

/** How the relay ended: the first side to close and why. */
export interface SctpRelayResult {
  readonly closedFirst: 'client' | 'endpoint';
  readonly info: SctpCloseInfo;
}

/** A running relay. */
export interface SctpRelay {
  readonly counters: Readonly<SctpRelayCounters>;
  /** Resolves once both associations are closed. */
  readonly done: Promise<SctpRelayResult>;
  /** Aborts both sides. */
  abort(reason: string): void;
}

/** Starts relaying between `client` and `endpoint` (both established). */
export function relayAssociations(client: SctpAssociation, endpoint: SctpAssociation): SctpRelay {
  const counters: SctpRelayCounters = {
    messagesToEndpoint: 0,
    messagesToClient: 0,
    bytesToEndpoint: 0,
    bytesToClient: 0,
    droppedAfterShutdown: 0,
  };
  let first: SctpRelayResult | undefined;
  let resolveDone!: (r: SctpRelayResult) => void;
  const done = new Promise<SctpRelayResult>((r) => {
    resolveDone = r;
  });
  const abortBoth = (reason: string): void => {
    if (!client.closeInfo) client.abort(reason);
    if (!endpoint.closeInfo) endpoint.abort(reason);
  };

  const pipe = (from: SctpAssociation, to: SctpAssociation, toEndpoint: boolean): void => {
    let shutdownPending = false;
    const forward = (m: SctpMessage): void => {
      if (to.closeInfo) return;
      if (to.state !== 'established') {
        counters.droppedAfterShutdown++;
        return;
      }
      if (m.streamId >= to.outboundStreams) {
        abortBoth(
          `stream ${m.streamId} is beyond the ${to.outboundStreams} stream(s) of the other side`,
        );
        return;
      }
      let more: boolean;
      try {
        more = to.send({
          streamId: m.streamId,
          ppid: m.ppid,
          unordered: m.unordered,
          data: m.data,
        });
      } catch (err) {
        abortBoth(`relay send failed: ${(err as Error).message}`);
        return;
      }
      if (toEndpoint) {
        counters.messagesToEndpoint++;
        counters.bytesToEndpoint += m.data.length;
      } else {
        counters.messagesToClient++;
        counters.bytesToClient += m.data.length;
      }
      if (!more) from.pause();
    };
    from.on('message', forward);
    to.on('drain', () => {
      if (from.closeInfo) return;
      from.resume();
      if (shutdownPending && !from.isPaused) {
        shutdownPending = false;
        to.shutdown();
      }
    });
    // The peer of `from` said it sends nothing more: pass the graceful close on, after what it sent.
    from.on('shutdown', () => {
      if (from.isPaused) shutdownPending = true;
      else to.shutdown();
    });
    from.on('close', (info) => {
      if (first === undefined) first = { closedFirst: toEndpoint ? 'client' : 'endpoint', info };
      if (!to.closeInfo) {
        if (info.reason === 'shutdown') to.shutdown();
        else to.abort(`the other side closed: ${info.reason}`);
      }
      if (to.closeInfo) resolveDone(first);
    });
  };
  pipe(client, endpoint, true);
  pipe(endpoint, client, false);
  if (client.closeInfo || endpoint.closeInfo) abortBoth('one side was already closed');
  return { counters, done, abort: abortBoth };
}
