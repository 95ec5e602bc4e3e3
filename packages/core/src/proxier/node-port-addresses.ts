import { BlockList, isIP } from 'node:net';
import { type NetworkInterfaceInfo, networkInterfaces as osNetworkInterfaces } from 'node:os';
import { InvalidOptionError } from '../errors.js';

/** What `os.networkInterfaces()` returns; injected so tests can describe any host. */
export type NetworkInterfacesFn = () => NodeJS.Dict<NetworkInterfaceInfo[]>;

/** How {@link resolveNodePortAddresses} finds the host's addresses. */
export interface NodePortAddressEnv {
  /** The node's primary IPs for the "primary" keyword. Default: {@link detectPrimaryIPs}. */
  nodeIPs?: readonly string[];
  /** Default: `os.networkInterfaces`. */
  networkInterfaces?: NetworkInterfacesFn;
}

/** One parsed entry of `nodePortAddresses`. */
type NodePortAddressSpec =
  | { kind: 'all' | 'primary' | 'localhost' }
  | { kind: 'cidr'; list: BlockList; text: string };

/**
 * Checks `nodePortAddresses` when the Proxier is built, so a typo stops the program at start instead
 * of leaving node ports silently unserved. Accepted: CIDRs ("10.0.0.0/8", "fd00::/64") and the
 * keywords "primary", "localhost" and "all".
 * @throws InvalidOptionError
 */
export function parseNodePortAddresses(specs: readonly string[]): NodePortAddressSpec[] {
  if (!Array.isArray(specs)) {
    throw new InvalidOptionError('nodePortAddresses', 'expected an array of CIDRs or keywords');
  }
  return specs.map((spec) => {
    if (spec === 'all' || spec === 'primary' || spec === 'localhost') return { kind: spec };
    const cidr = parseCidr(spec);
    if (cidr === undefined) {
      throw new InvalidOptionError(
        'nodePortAddresses',
        `"${String(spec)}" is neither a CIDR nor one of "primary", "localhost", "all"`,
      );
    }
    const list = new BlockList();
    list.addSubnet(cidr.address, cidr.prefix, cidr.family === 4 ? 'ipv4' : 'ipv6');
    return { kind: 'cidr', list, text: spec };
  });
}

/**
 * The addresses node ports are served on: `null` alone means every address (the unspecified address
 * is bound once), otherwise the host's interface addresses that match. An empty or missing list, or
 * one containing "all", means every address. "localhost" picks the loopback addresses, "primary" the
 * `nodeIPs` (or the detected primary IPs), a CIDR every interface address inside it. IPv6 link-local
 * addresses are skipped: they cannot be bound without a scope. Addresses are resolved once, when the
 * Proxier is built.
 * @throws InvalidOptionError for a malformed entry.
 */
export function resolveNodePortAddresses(
  specs: readonly string[] | undefined,
  env: NodePortAddressEnv = {},
): (string | null)[] {
  if (specs === undefined || specs.length === 0) return [null];
  const parsed = parseNodePortAddresses(specs);
  if (parsed.some((spec) => spec.kind === 'all')) return [null];
  const interfaces = interfaceAddresses(env.networkInterfaces ?? osNetworkInterfaces);
  const result = new Set<string>();
  for (const spec of parsed) {
    if (spec.kind === 'primary') {
      for (const ip of env.nodeIPs ?? detectPrimaryIPs(env.networkInterfaces)) result.add(ip);
    } else if (spec.kind === 'localhost') {
      for (const info of interfaces) if (isLoopback(info.address)) result.add(info.address);
    } else if (spec.kind === 'cidr') {
      for (const info of interfaces) {
        if (spec.list.check(info.address, info.family === 'IPv4' ? 'ipv4' : 'ipv6')) {
          result.add(info.address);
        }
      }
    }
  }
  return [...result];
}

/**
 * The node's primary IPs when none are given: the first non-internal IPv4 address and the first
 * non-internal, non-link-local IPv6 address, in interface order. The reference asked the routing table
 * for the default-route interface; interface order is what Node can tell without reading /proc, and
 * `nodeIPs` overrides it.
 */
export function detectPrimaryIPs(networkInterfaces: NetworkInterfacesFn = osNetworkInterfaces) {
  const ips: string[] = [];
  for (const family of ['IPv4', 'IPv6'] as const) {
    const found = interfaceAddresses(networkInterfaces).find(
      (info) => info.family === family && !info.internal,
    );
    if (found) ips.push(found.address);
  }
  return ips;
}

/** Every address on the host's interfaces, for "is this IP local?" checks during a sync. */
export function localAddresses(networkInterfaces: NetworkInterfacesFn = osNetworkInterfaces) {
  return new Set(interfaceAddresses(networkInterfaces).map((info) => info.address));
}

/** A CIDR as address, prefix and family; undefined when malformed. */
export function parseCidr(
  text: unknown,
): { address: string; prefix: number; family: 4 | 6 } | undefined {
  if (typeof text !== 'string') return undefined;
  const slash = text.indexOf('/');
  if (slash < 0) return undefined;
  const address = text.slice(0, slash);
  const prefixText = text.slice(slash + 1);
  const family = isIP(address);
  if (family === 0 || !/^\d{1,3}$/.test(prefixText)) return undefined;
  const prefix = Number(prefixText);
  if (prefix > (family === 4 ? 32 : 128)) return undefined;
  return { address, prefix, family: family as 4 | 6 };
}

function interfaceAddresses(networkInterfaces: NetworkInterfacesFn): NetworkInterfaceInfo[] {
  let all: NodeJS.Dict<NetworkInterfaceInfo[]>;
  try {
    all = networkInterfaces();
  } catch {
    return [];
  }
  return Object.values(all)
    .flatMap((infos) => infos ?? [])
    .filter((info) => !(info.family === 'IPv6' && info.address.toLowerCase().startsWith('fe80:')));
}

function isLoopback(ip: string): boolean {
  return ip === '::1' || ip.startsWith('127.');
}
