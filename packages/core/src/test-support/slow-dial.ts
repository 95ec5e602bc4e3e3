import type net from 'node:net';

/**
 * Holds back a dial attempt's 'connect' for `ms` (on loopback the handshake itself is instant, so a
 * test that needs a dial in flight cannot get one from the kernel), and calls `onConnect` just
 * before it is let through. Wrap what a proxy socket's `connect` option returns with it.
 */
export function delayConnect(
  leg: net.Socket,
  ms: number,
  onConnect: () => void = () => {},
): net.Socket {
  const emit = leg.emit.bind(leg);
  leg.emit = ((event: string | symbol, ...args: unknown[]): boolean => {
    if (event !== 'connect') return emit(event, ...args);
    setTimeout(() => {
      onConnect();
      emit(event, ...args);
    }, ms);
    return true;
  }) as typeof leg.emit;
  return leg;
}
