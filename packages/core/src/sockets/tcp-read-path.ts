import net from 'node:net';
import type { RelayReadPath } from '../diagnostics.js';

/**
 * How relayed sockets get onto the copy-free read path, and how often they did not. An accepted
 * socket is switched to the relay's buffers after the fact (`net.Server` has no `onread` option),
 * which reaches into net.Socket's private slots; every socket's outcome is counted so that a Node
 * upgrade that moves those slots shows as a counted, logged fallback instead of a silent slowdown.
 */

/** Counts one relayed socket's read path (the dialled leg's is counted by `connectForRelay`). */
export function countReadPath(path: RelayReadPath): void {
  readPathCounts[path]++;
}

/** The private slots `net.Socket` keeps its `onread` option in, found once on a live socket. */
interface OnReadSlots {
  buffer: symbol;
  callback: symbol;
  generator: symbol;
}
let onReadSlots: OnReadSlots | null | undefined;

function findOnReadSlots(socket: net.Socket): OnReadSlots | null {
  if (onReadSlots !== undefined) return onReadSlots;
  const byName = new Map<string, symbol>();
  for (const symbol of Object.getOwnPropertySymbols(socket)) {
    if (symbol.description !== undefined) byName.set(symbol.description, symbol);
  }
  const buffer = byName.get('kBuffer');
  const callback = byName.get('kBufferCb');
  const generator = byName.get('kBufferGen');
  onReadSlots = buffer && callback && generator ? { buffer, callback, generator } : null;
  return onReadSlots;
}

/**
 * Makes an accepted socket read into `onread`'s buffers, as if it had been created with that
 * option; `net.Server` has no `onread` option, and this gives the client leg the same copy-free
 * read path as the dialled leg. `raw` must come from a server with `pauseOnConnect` (nothing read
 * yet). The cheap way sets the three slots the `net.Socket` constructor would have set and hands
 * the buffer to the handle, exactly as Node does for a socket made with `onread`; if this Node
 * keeps them differently, the handle moves to a new socket made with the option (one more socket
 * object per connection); if even that is impossible, `raw` is returned as is and the relay reads
 * it through 'data' events. `how.inPlace: false` skips the cheap way (for tests).
 */
export function adoptAcceptedSocket(
  raw: net.Socket,
  onread: net.OnReadOpts,
  how: { inPlace?: boolean } = {},
): AdoptedSocket {
  const holder = raw as unknown as Record<PropertyKey, unknown> & { _handle?: unknown };
  const handle = holder._handle as { useUserBuffer?: (buffer: Uint8Array) => void } | null;
  if (raw.destroyed || handle === null || typeof handle !== 'object') {
    // Gone already: nothing to read, and nothing the fast path lost.
    return { socket: raw, usesOnread: false, path: 'data-events' };
  }
  const slots = how.inPlace === false ? null : findOnReadSlots(raw);
  const generate = onread.buffer;
  if (
    slots !== null &&
    holder[slots.buffer] === null &&
    typeof handle.useUserBuffer === 'function' &&
    typeof generate === 'function'
  ) {
    const buffer = generate();
    holder[slots.generator] = generate;
    holder[slots.callback] = onread.callback;
    holder[slots.buffer] = buffer;
    handle.useUserBuffer(buffer);
    countReadPath('in-place');
    return { socket: raw, usesOnread: true, path: 'in-place' };
  }
  let socket: net.Socket;
  try {
    socket = new net.Socket({
      handle,
      allowHalfOpen: true,
      pauseOnCreate: true,
      readable: true,
      writable: true,
      onread,
    } as net.SocketConstructorOpts);
  } catch {
    countReadPath('data-events');
    return { socket: raw, usesOnread: false, path: 'data-events' };
  }
  holder._handle = null;
  raw.destroy();
  countReadPath('moved-handle');
  return { socket, usesOnread: true, path: 'moved-handle' };
}

/** What {@link adoptAcceptedSocket} did. */
export interface AdoptedSocket {
  /** The socket to relay: `raw`, or a new one that took over its handle. */
  socket: net.Socket;
  /** True when `socket` reads into the relay's buffers. */
  usesOnread: boolean;
  /** Which read path it got; anything but `in-place` is a fallback worth reporting. */
  path: RelayReadPath;
}

/** How many sockets got each read path, since the process started. */
const readPathCounts: Record<RelayReadPath, number> = {
  'in-place': 0,
  'moved-handle': 0,
  'data-events': 0,
};

/**
 * How many relayed sockets got each read path since the process started (accepted clients through
 * {@link adoptAcceptedSocket}, dialled endpoints through {@link connectForRelay}). A Node upgrade
 * that moves net.Socket's internals shows up here as `moved-handle` or `data-events` counts instead
 * of a silent loss of speed; the default TCP socket also logs the first fallback and publishes each
 * on the `relayFallback` channel.
 */
export function relayReadPathCounts(): Readonly<Record<RelayReadPath, number>> {
  return { ...readPathCounts };
}
