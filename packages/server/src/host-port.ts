import { isIP, isIPv6 } from 'node:net';
import { parseCidr } from '@userspace-proxy/core';
import { joinHostPort, splitHostPortText } from '@userspace-proxy/core/sockets';

/**
 * Address helpers with Go's `net` semantics. kube-proxy's validation messages depend on exactly how
 * Go splits "host:port" (an empty port is allowed, three colons are not), so the daemon mirrors it
 * instead of using URL parsing, which would accept and reject different strings.
 */

/**
 * Go's net.SplitHostPort: "[::1]:80" → ["::1", "80"]; the port is not checked. Core's parser
 * follows the same rules, so the daemon's messages and core's endpoint parsing never disagree.
 */
export const goSplitHostPort = splitHostPortText;

/** True for a textual IPv4 or IPv6 address (no brackets, no zone). */
export function isIPAddress(value: string): boolean {
  return isIP(value) !== 0;
}

/** True for the all-zeros address of either family, where a listener takes every local address. */
export function isUnspecified(ip: string): boolean {
  return ip === '0.0.0.0' || (isIPv6(ip) && /^[0:]+$/.test(ip));
}

/** True for 127.0.0.0/8 and ::1. */
export function isLoopback(ip: string): boolean {
  return /^127\./.test(ip) || ip === '::1' || /^(0{0,4}:){7}0{0,3}1$/.test(ip);
}

/** The address family of a CIDR ("10.0.0.0/8", "fd00::/64"), or undefined when it is not one. */
export function cidrFamily(value: string): 'IPv4' | 'IPv6' | undefined {
  const cidr = parseCidr(value);
  if (!cidr) return undefined;
  return cidr.family === 4 ? 'IPv4' : 'IPv6';
}

/** Joins like Go's net.JoinHostPort: IPv6 hosts are bracketed (core's joinHostPort). */
export const goJoinHostPort = joinHostPort;

/**
 * kube-proxy's AppendPortIfNeeded: a bare IP gets `port`; anything else (already "ip:port", or
 * garbage that validation will report) is returned unchanged.
 */
export function appendPortIfNeeded(value: string, port: number): string {
  if (goSplitHostPort(value) !== undefined) return value;
  return isIPAddress(value) ? goJoinHostPort(value, port) : value;
}

/** Parses a listen address "ip:port" that validation has accepted. */
export function parseListenAddress(value: string): { host: string; port: number } {
  const parts = goSplitHostPort(value);
  if (parts === undefined) throw new TypeError(`not an ip:port address: ${value}`);
  return { host: parts.host, port: Number(parts.port) };
}
