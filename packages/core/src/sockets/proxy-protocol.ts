import { isIPv4, isIPv6 } from 'node:net';
import type { Logger } from '../logger.js';
import { quoteForLog } from '../model/log-safe.js';
import type { Addr } from '../model/model.js';
import {
  PROXY_PROTOCOL_ANNOTATION,
  type ProxyProtocolVersion,
  proxyProtocolOf,
} from '../model/proxy-protocol-annotation.js';
import type { ServiceInfo } from '../model/service-info.js';
import type { ProxySocketContext } from './proxy-socket.js';

/**
 * The PROXY protocol (HAProxy's spec, versions 1 and 2) towards endpoints: the header that tells a
 * backend who the client is, written on the endpoint connection after the dial and before the first
 * client byte. kube-proxy's userspace mode could never do this (kubernetes#10921): every backend saw
 * the proxy's address. Only the PROXY command is written (v2's LOCAL is for health checks a proxy
 * makes itself, which this proxy never does), over TCP (v1 `TCP4`/`TCP6`/`UNKNOWN`; v2 `STREAM`
 * over `INET`/`INET6`, or `UNSPEC` when an address is unknown).
 */

/** One end of a connection: an IP literal as Node reports it (IPv4-mapped IPv6 allowed) and a port. */
export interface ProxyProtocolEndpoint {
  readonly address: string;
  readonly port: number;
}

/** v2's 12-byte signature: `\r\n\r\n\0\r\nQUIT\n`. */
export const PROXY_V2_SIGNATURE: Buffer = Buffer.from([
  0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a,
]);

/** v2's version (2, high nibble) and command (PROXY = 1, low nibble). */
const V2_PROXY_COMMAND = 0x21;
/** v2 address family (high nibble) and transport (low nibble) bytes. */
const V2_UNSPEC = 0x00;
const V2_TCP4 = 0x11;
const V2_TCP6 = 0x21;

/** `::ffff:a.b.c.d` as `a.b.c.d`; anything else as it is (a zone index is dropped). */
function unmapped(address: string): string {
  const zone = address.indexOf('%');
  const bare = zone < 0 ? address : address.slice(0, zone);
  if (bare.length > 7 && bare.slice(0, 7).toLowerCase() === '::ffff:' && isIPv4(bare.slice(7))) {
    return bare.slice(7);
  }
  return bare;
}

/** Which header a pair of addresses gets: both IPv4, both IPv6 (an IPv4 one mapped), or unknown. */
function familyOf(src: string, dst: string): 4 | 6 | 0 {
  const s4 = isIPv4(src);
  const d4 = isIPv4(dst);
  if (s4 && d4) return 4;
  if ((s4 || isIPv6(src)) && (d4 || isIPv6(dst))) return 6;
  return 0;
}

function validPort(port: number): boolean {
  return Number.isInteger(port) && port >= 0 && port <= 65_535;
}

/** An IPv6 literal (IPv4-mapped written as IPv6 when `address` is IPv4) as 16 bytes at `offset`. */
function writeIPv6(address: string, out: Buffer, offset: number): void {
  if (isIPv4(address)) {
    out.fill(0, offset, offset + 10);
    out[offset + 10] = 0xff;
    out[offset + 11] = 0xff;
    writeIPv4(address, out, offset + 12);
    return;
  }
  let text = address;
  let tail: number[] = [];
  const lastColon = text.lastIndexOf(':');
  if (text.includes('.', lastColon)) {
    // An embedded IPv4 part: the last two groups.
    const v4 = text
      .slice(lastColon + 1)
      .split('.')
      .map(Number);
    tail = [((v4[0] ?? 0) << 8) | (v4[1] ?? 0), ((v4[2] ?? 0) << 8) | (v4[3] ?? 0)];
    text = `${text.slice(0, lastColon + 1)}0`;
  }
  const [head = '', rest] = text.split('::');
  const parse = (part: string): number[] =>
    part === '' ? [] : part.split(':').map((g) => Number.parseInt(g, 16));
  const left = parse(head);
  const right = rest === undefined ? [] : parse(rest);
  if (tail.length > 0) {
    // The "0" placeholder stands where the IPv4 part's two groups go.
    (rest === undefined ? left : right).pop();
  }
  const groups = [...left];
  const missing = 8 - left.length - right.length - tail.length;
  for (let i = 0; i < missing; i++) groups.push(0);
  groups.push(...right, ...tail);
  for (let i = 0; i < 8; i++) out.writeUInt16BE(groups[i] ?? 0, offset + 2 * i);
}

function writeIPv4(address: string, out: Buffer, offset: number): void {
  const parts = address.split('.');
  for (let i = 0; i < 4; i++) out[offset + i] = Number(parts[i]);
}

/**
 * The v1 header: `PROXY TCP4 <src> <dst> <sport> <dport>\r\n` (`TCP6` for IPv6, an IPv4-mapped
 * address written as IPv4 when both are), or `PROXY UNKNOWN\r\n` when an address is not known.
 */
export function encodeProxyV1(src: ProxyProtocolEndpoint, dst: ProxyProtocolEndpoint): Buffer {
  let s = unmapped(src.address);
  let d = unmapped(dst.address);
  const family = validPort(src.port) && validPort(dst.port) ? familyOf(s, d) : 0;
  if (family === 0) return Buffer.from('PROXY UNKNOWN\r\n', 'latin1');
  if (family === 6) {
    if (isIPv4(s)) s = `::ffff:${s}`;
    if (isIPv4(d)) d = `::ffff:${d}`;
  }
  return Buffer.from(`PROXY TCP${family} ${s} ${d} ${src.port} ${dst.port}\r\n`, 'latin1');
}

/**
 * The v2 header for a stream: signature, `0x21` (version 2, PROXY), `0x11` (INET, STREAM) or `0x21`
 * (INET6, STREAM) or `0x00` (UNSPEC: the receiver uses the connection's own addresses), the length
 * of what follows, then source and destination address, source and destination port, all in
 * network byte order. No TLVs.
 */
export function encodeProxyV2(src: ProxyProtocolEndpoint, dst: ProxyProtocolEndpoint): Buffer {
  const s = unmapped(src.address);
  const d = unmapped(dst.address);
  const family = validPort(src.port) && validPort(dst.port) ? familyOf(s, d) : 0;
  const length = family === 4 ? 12 : family === 6 ? 36 : 0;
  const out = Buffer.alloc(16 + length);
  PROXY_V2_SIGNATURE.copy(out, 0);
  out[12] = V2_PROXY_COMMAND;
  out[13] = family === 4 ? V2_TCP4 : family === 6 ? V2_TCP6 : V2_UNSPEC;
  out.writeUInt16BE(length, 14);
  if (family === 4) {
    writeIPv4(s, out, 16);
    writeIPv4(d, out, 20);
    out.writeUInt16BE(src.port, 24);
    out.writeUInt16BE(dst.port, 26);
  } else if (family === 6) {
    writeIPv6(s, out, 16);
    writeIPv6(d, out, 32);
    out.writeUInt16BE(src.port, 48);
    out.writeUInt16BE(dst.port, 50);
  }
  return out;
}

/** The header of `version` for a connection from `src` to `dst`. */
export function encodeProxyHeader(
  version: ProxyProtocolVersion,
  src: ProxyProtocolEndpoint,
  dst: ProxyProtocolEndpoint,
): Buffer {
  return version === 'v1' ? encodeProxyV1(src, dst) : encodeProxyV2(src, dst);
}

/** What the header writer reads of a connection: the client's address and its socket. */
export interface ProxyHeaderConnection {
  /** The client's address and port (read from the socket once, then cached by the connection). */
  readonly address: string;
  readonly port: number;
  /** The client socket: its local address is the address the client connected to. */
  readonly client: {
    readonly localAddress?: string | undefined;
    readonly localPort?: number | undefined;
  };
}

/** Writes a connection's header on its endpoint socket (`write` is the socket's). */
export type ProxyHeaderWriter = (
  connection: ProxyHeaderConnection,
  endpoint: { readonly destroyed: boolean; write(chunk: Buffer): unknown },
  info: ServiceInfo | undefined,
) => void;

/**
 * The header writer of a socket, or undefined when its Service does not ask for the PROXY protocol
 * (then the socket adds nothing per connection). The destination written is the address the client
 * connected to: the client socket's local address when the socket listens on its portal (portal
 * mode, and redirect mode's own listeners on local Service IPs and node ports). When the socket is
 * behind a redirect rule (redirect mode's proxy port), that local address is the proxy port's, and
 * the original destination (SO_ORIGINAL_DST) cannot be read from Node: the portal the socket serves
 * is written instead (the cluster IP and Service port; a load-balancer IP's own socket, its first
 * load-balancer IP). A bad annotation value (only a context built without validation has one) is
 * logged and the header left off.
 */
export function proxyHeaderWriter(
  context: ProxySocketContext,
  bound: Addr,
  log: Logger,
): ProxyHeaderWriter | undefined {
  if (context.protocol !== 'TCP') return undefined;
  const version = proxyProtocolOf(context.service);
  if (version === undefined) return undefined;
  if (typeof version !== 'string') {
    log.warn(
      `ignoring the ${PROXY_PROTOCOL_ANNOTATION} annotation: must be v1 or v2, got ${quoteForLog(version.invalid)}`,
    );
    return undefined;
  }
  return (connection, endpoint, info) => {
    if (endpoint.destroyed) return;
    const src = { address: connection.address, port: connection.port };
    const portal = info?.portal;
    const redirected =
      portal !== undefined &&
      ((portal.ip !== '' && portal.ip !== bound.address && portal.ip !== context.ip) ||
        (portal.port !== 0 && portal.port !== context.port && portal.port !== bound.port));
    const dst =
      redirected && portal !== undefined
        ? { address: portal.ip, port: portal.port }
        : {
            address: connection.client.localAddress ?? '',
            port: connection.client.localPort ?? -1,
          };
    endpoint.write(encodeProxyHeader(version, src, dst));
  };
}
