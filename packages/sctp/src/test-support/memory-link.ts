/**
 * Two {@link SctpEndpoint}s joined by an in-memory "wire" (no sockets): packets cross on
 * setImmediate, through an optional filter. For fuzzing and deterministic tests.
 */
import type { Association } from '../association.js';
import { type DatagramSocket, type EndpointListener, SctpEndpoint } from '../endpoint.js';
import { resolveAssociationOptions, type SctpAssociationOptions } from '../options.js';
import { defaultTimers, type SctpTimers } from '../timers.js';

/** What a filter decides for one packet: deliver it (possibly changed) or drop it (undefined). */
export type LinkFilter = (packet: Buffer, from: 'a' | 'b') => Buffer | undefined;

class MemorySocket implements DatagramSocket {
  peer: SctpEndpoint | undefined;
  filter: LinkFilter | undefined;
  /** Sees each packet synchronously when it is sent (timestamps under manual timers). */
  tap: ((packet: Buffer) => void) | undefined;
  sent = 0;
  constructor(
    private readonly side: 'a' | 'b',
    private readonly address: string,
    private readonly port: number,
  ) {}
  send(msg: Buffer, _port: number, _address: string, cb?: (err: Error | null) => void): void {
    this.sent++;
    this.tap?.(msg);
    const copy = Buffer.from(msg);
    setImmediate(() => {
      cb?.(null);
      const out = this.filter ? this.filter(copy, this.side) : copy;
      if (out !== undefined) this.peer?.receive(out, this.address, this.port);
    });
  }
  close(cb?: () => void): void {
    this.peer = undefined;
    cb?.();
  }
}

/** A client endpoint `a` (10.0.0.1:1001) and a server endpoint `b` (10.0.0.2:1002) listening on SCTP port 5000. */
export interface MemoryLink {
  readonly a: SctpEndpoint;
  readonly b: SctpEndpoint;
  readonly accepted: Association[];
  readonly socketA: {
    filter: LinkFilter | undefined;
    tap: ((p: Buffer) => void) | undefined;
    sent: number;
  };
  readonly socketB: {
    filter: LinkFilter | undefined;
    tap: ((p: Buffer) => void) | undefined;
    sent: number;
  };
  connect(options?: SctpAssociationOptions): Association;
}

/** Builds the link. */
export function memoryLink(
  options: SctpAssociationOptions = {},
  timers: SctpTimers = defaultTimers,
  limits: { maxAssociations?: number; maxAssociationsPerAddress?: number } = {},
): MemoryLink {
  const sa = new MemorySocket('a', '10.0.0.1', 1001);
  const sb = new MemorySocket('b', '10.0.0.2', 1002);
  const a = new SctpEndpoint(sa, '10.0.0.1', 1001, { timers, replyRate: 1e9 });
  const b = new SctpEndpoint(sb, '10.0.0.2', 1002, { timers, replyRate: 1e9 });
  sa.peer = b;
  sb.peer = a;
  const accepted: Association[] = [];
  let nextPort = 0;
  const resolved = resolveAssociationOptions(options);
  const listener: EndpointListener = {
    options: resolved,
    maxAssociations: limits.maxAssociations ?? 1 << 20,
    maxAssociationsPerAddress: limits.maxAssociationsPerAddress ?? 1 << 20,
    associations: 0,
    accept: (x) => accepted.push(x),
  };
  b.addPortListener(5000, listener);
  return {
    a,
    b,
    accepted,
    socketA: sa,
    socketB: sb,
    connect: (o) =>
      a.connect(
        resolveAssociationOptions({ ...options, ...o }),
        '10.0.0.2',
        5000,
        1002,
        40000 + (nextPort++ % 20000),
      ),
  };
}
