/** Helpers for SCTP tests on loopback: random addresses and ports to avoid parallel collisions. */
import type { SctpAssociation, SctpMessage } from '../index.js';

/** A random 127.x.y.z address (x, y, z in 1..254). */
export function randomLoopback(): string {
  const r = (): number => 1 + Math.floor(Math.random() * 254);
  return `127.${r()}.${r()}.${r()}`;
}

/** A random UDP port in 20000..59999. */
export function randomPort(): number {
  return 20000 + Math.floor(Math.random() * 40000);
}

/** Collects the messages of an association. */
export function collect(a: SctpAssociation): SctpMessage[] {
  const out: SctpMessage[] = [];
  a.on('message', (m) => out.push(m));
  return out;
}

/** Resolves with the association's close info. */
export function closed(a: SctpAssociation): Promise<NonNullable<SctpAssociation['closeInfo']>> {
  if (a.closeInfo) return Promise.resolve(a.closeInfo);
  return new Promise((resolve) => a.once('close', resolve));
}

/** Sends everything in order, respecting backpressure. */
export async function sendAll(
  a: SctpAssociation,
  messages: Iterable<{ streamId?: number; ppid?: number; unordered?: boolean; data: Buffer }>,
): Promise<void> {
  for (const m of messages) {
    if (!a.send(m)) await new Promise<void>((resolve) => a.once('drain', resolve));
  }
}
