import type { Protocol } from './model.js';
import { namespacedKey } from './object-key.js';

/**
 * Names one port of one Service. Keys are (namespace, name, port) as in the reference: `protocol` is
 * carried for display and is not part of the identity, because port names are unique in a Service.
 */
export interface ServicePortName {
  /** The Service's namespace. */
  namespace: string;
  /** The Service's name. */
  name: string;
  /** The *name* of the Service port, possibly "". */
  port: string;
  /** For display only: never part of the key. */
  protocol?: Protocol;
}

/** "ns/name:port", or "ns/name" when the port name is "": the key of every per-port map, and the log form. */
export function servicePortNameString(n: ServicePortName): string {
  const key = namespacedKey(n.namespace, n.name);
  return n.port === '' ? key : `${key}:${n.port}`;
}

/**
 * Joins a host and a port the way Go's net.JoinHostPort does: a host with a colon (every IPv6
 * literal) is bracketed, so "fd00::1" and 80 give "[fd00::1]:80". Endpoint strings everywhere in
 * the project have this form. It looks for the colon only: `net.isIPv6` ran a regular expression
 * per call, which showed in profiles of the connection and UDP-session paths, and could only ever
 * agree with the colon test.
 */
export function joinHostPort(host: string, port: number | string): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * Splits "host:port" the way Go's net.SplitHostPort does, with the port left as text (possibly
 * empty) and unchecked: "[::1]:80" → { host: "::1", port: "80" }. A host is bracketed exactly when it
 * has a colon, and a bracket never stands in a host. kube-proxy's configuration messages depend on exactly
 * these rules, so the daemon validates addresses with it; {@link splitHostPort} builds on it for
 * endpoint strings. Returns undefined for anything else.
 */
export function splitHostPortText(hostPort: string): { host: string; port: string } | undefined {
  if (hostPort.startsWith('[')) {
    const end = hostPort.indexOf(']');
    if (end < 0 || hostPort[end + 1] !== ':') return undefined;
    const host = hostPort.slice(1, end);
    const port = hostPort.slice(end + 2);
    if (host.includes('[') || port.includes(':')) return undefined;
    return { host, port };
  }
  const colon = hostPort.lastIndexOf(':');
  if (colon < 0) return undefined;
  const host = hostPort.slice(0, colon);
  if (host.includes(':') || host.includes('[') || host.includes(']')) return undefined;
  return { host, port: hostPort.slice(colon + 1) };
}

/**
 * Splits an endpoint string made by {@link joinHostPort}: a non-empty host and a decimal port of at
 * most five digits, up to 65535. Returns undefined for anything else, so a caller can reject a
 * malformed value instead of dialling garbage.
 */
export function splitHostPort(hostPort: string): { host: string; port: number } | undefined {
  const parts = splitHostPortText(hostPort);
  if (parts === undefined || parts.host === '' || !/^\d{1,5}$/.test(parts.port)) return undefined;
  const port = Number(parts.port);
  return port > 65_535 ? undefined : { host: parts.host, port };
}
