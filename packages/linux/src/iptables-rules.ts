import { isIP } from 'node:net';
import type { Portal } from '@userspace-proxy/core';
import { servicePortNameString } from '@userspace-proxy/core';
import { joinHostPort } from '@userspace-proxy/core/sockets';
import { type CommandResult, commandOutput, isCommandNotFound } from './command-runner.js';

/**
 * The iptables rules of the redirect mode, as data: which chains exist, how they are reached, the
 * rules one portal needs, and how iptables says "not there". Kept apart from the code that runs
 * iptables so that the exact rules can be read, documented and tested without a kernel.
 */

/** An iptables table this proxy writes to. */
export type IptablesTable = 'nat' | 'filter';

/** The chains this proxy owns; nothing else is ever written to, except the five jump rules. */
export const IPTABLES_CHAINS = {
  /** nat, from PREROUTING: Service addresses reached from other hosts and containers. */
  portalsContainer: 'KUBE-PORTALS-CONTAINER',
  /** nat, from OUTPUT: Service addresses reached from this host's own processes. */
  portalsHost: 'KUBE-PORTALS-HOST',
  /** nat, from PREROUTING (local destinations only): node ports reached from outside. */
  nodePortContainer: 'KUBE-NODEPORT-CONTAINER',
  /** nat, from OUTPUT (local destinations only): node ports reached from this host. */
  nodePortHost: 'KUBE-NODEPORT-HOST',
  /** filter, from INPUT: lets new connections to a node port's proxy port in. */
  nodePortNonLocal: 'KUBE-NODEPORT-NON-LOCAL',
} as const;

/** One rule: `iptables -t table -A chain ...args`. */
export interface IptablesRule {
  /** "nat" or "filter". */
  table: IptablesTable;
  /** The chain the rule lives in. */
  chain: string;
  /** Everything after the chain name: matches, then `-j` and the target. */
  args: readonly string[];
}

/** A rule in a built-in chain that sends traffic to one of ours. */
export interface JumpRule extends IptablesRule {
  /** Prepended rules must run before anything else; appended ones after everything else. */
  position: 'prepend' | 'append';
  /** The chain jumped to, which must exist first. */
  target: string;
}

/** The chains in the order they are created, with their tables. */
export const OWNED_CHAINS: readonly { table: IptablesTable; chain: string }[] = [
  { table: 'nat', chain: IPTABLES_CHAINS.portalsContainer },
  { table: 'nat', chain: IPTABLES_CHAINS.portalsHost },
  { table: 'nat', chain: IPTABLES_CHAINS.nodePortContainer },
  { table: 'nat', chain: IPTABLES_CHAINS.nodePortHost },
  { table: 'filter', chain: IPTABLES_CHAINS.nodePortNonLocal },
];

const comment = (text: string): string[] => ['-m', 'comment', '--comment', text];
const LOCAL_DST = ['-m', 'addrtype', '--dst-type', 'LOCAL'];
const PORTALS = comment('handle ClusterIPs; NOTE: this must be before the NodePort rules');
const NODE_PORTS = [
  ...LOCAL_DST,
  ...comment('handle service NodePorts; NOTE: this must be the last rule in the chain'),
];
const NON_LOCAL = comment('Ensure that non-local NodePort traffic can flow');

function jump(
  table: IptablesTable,
  chain: string,
  target: string,
  position: JumpRule['position'],
  match: readonly string[],
): JumpRule {
  return { table, chain, target, position, args: [...match, '-j', target] };
}

const { portalsContainer, portalsHost, nodePortContainer, nodePortHost, nodePortNonLocal } =
  IPTABLES_CHAINS;

/**
 * The five jump rules. Portal chains are prepended so that a Service address wins over a node port
 * on hosts (GCE) where load-balancer IPs count as local; node-port chains are appended so that they
 * only see what nothing else claimed.
 */
export const JUMP_RULES: readonly JumpRule[] = [
  jump('nat', 'PREROUTING', portalsContainer, 'prepend', PORTALS),
  jump('nat', 'OUTPUT', portalsHost, 'prepend', PORTALS),
  jump('nat', 'PREROUTING', nodePortContainer, 'append', NODE_PORTS),
  jump('nat', 'OUTPUT', nodePortHost, 'append', NODE_PORTS),
  jump('filter', 'INPUT', nodePortNonLocal, 'prepend', NON_LOCAL),
];

/**
 * The address family of a portal: from its IP, or for a node port from where the proxy listens (so a
 * node port with proxy IP "::" gets IPv6 rules only).
 */
export function portalFamily(portal: Portal): 'IPv4' | 'IPv6' {
  const ip = portal.ip ?? portal.proxyIP;
  return isIP(ip) === 6 ? 'IPv6' : 'IPv4';
}

/** True for "0.0.0.0" and "::" (in any spelling): the proxy listens everywhere, so REDIRECT works. */
export function isUnspecifiedIP(ip: string): boolean {
  if (isIP(ip) === 4) return ip === '0.0.0.0';
  return isIP(ip) === 6 && /^[0:]+$/.test(ip);
}

function isPort(n: unknown): boolean {
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 65_535;
}

const PROTOCOLS = new Set(['TCP', 'UDP', 'SCTP']);
const KINDS = new Set(['cluster-ip', 'external-ip', 'load-balancer', 'node-port']);
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
const CONTROL = /[\u0000-\u001f\u007f]/;

/**
 * Why a portal cannot be turned into rules, or undefined when it can. A portal comes from Service
 * objects, which are untrusted input: a bad one is refused, never passed to iptables half-checked.
 */
export function invalidPortalReason(portal: Portal): string | undefined {
  if (typeof portal !== 'object' || portal === null) return 'not an object';
  if (!PROTOCOLS.has(portal.protocol)) return `unsupported protocol "${String(portal.protocol)}"`;
  if (!KINDS.has(portal.kind)) return `unknown portal kind "${String(portal.kind)}"`;
  if (!isPort(portal.port)) return `invalid port ${String(portal.port)}`;
  if (!isPort(portal.proxyPort)) return `invalid proxy port ${String(portal.proxyPort)}`;
  if (typeof portal.proxyIP !== 'string' || isIP(portal.proxyIP) === 0) {
    return `invalid proxy IP "${String(portal.proxyIP)}"`;
  }
  if (portal.kind === 'node-port') {
    if (portal.ip !== null) return 'a node-port portal has no IP';
  } else {
    if (typeof portal.ip !== 'string' || isIP(portal.ip) === 0) {
      return `invalid IP "${String(portal.ip)}"`;
    }
    // REDIRECT ignores the proxy IP (a dual-stack "::" listener takes IPv4 too); DNAT cannot mix.
    if (isIP(portal.ip) !== isIP(portal.proxyIP) && !isUnspecifiedIP(portal.proxyIP)) {
      return 'IP and proxy IP are of different families';
    }
  }
  const s = portal.service;
  if (typeof s !== 'object' || s === null) return 'no service name';
  for (const part of [s.namespace, s.name, s.port]) {
    if (typeof part !== 'string' || CONTROL.test(part)) return 'malformed service name';
  }
  if (servicePortNameString(s).length > 255) return 'service name longer than an iptables comment';
  return undefined;
}

/** Options of {@link portalRules}. */
export interface PortalRuleOptions {
  /** Where this host's own traffic is DNATed when the proxy listens on every address. */
  hostIP: string;
  /** Whether the physdev match is available; without it the external-IP rule matches bridged traffic too. */
  physdev: boolean;
}

/**
 * The rules one portal needs, in the order they are added. The portal must be valid
 * ({@link invalidPortalReason}).
 *
 * - cluster IP, load-balancer IP: from containers (REDIRECT, or DNAT when the proxy listens on one
 *   address) and from the host (always DNAT: a REDIRECTed reply would come from the wrong address).
 * - external IP: from containers not arriving through a bridge port, from containers to a local
 *   external IP, and from the host to a local external IP.
 * - node port: from containers, from the host, and ACCEPT of new connections to the proxy port.
 */
export function portalRules(portal: Portal, options: PortalRuleOptions): IptablesRule[] {
  const proto = portal.protocol.toLowerCase();
  const common = (port: number): string[] => [
    ...comment(servicePortNameString(portal.service)),
    '-p',
    proto,
    '-m',
    proto,
    '--dport',
    String(port),
  ];
  const containerTarget = isUnspecifiedIP(portal.proxyIP)
    ? ['-j', 'REDIRECT', '--to-ports', String(portal.proxyPort)]
    : ['-j', 'DNAT', '--to-destination', joinHostPort(portal.proxyIP, portal.proxyPort)];
  const hostDest = isUnspecifiedIP(portal.proxyIP) ? options.hostIP : portal.proxyIP;
  const hostTarget = ['-j', 'DNAT', '--to-destination', joinHostPort(hostDest, portal.proxyPort)];
  const local = LOCAL_DST;

  if (portal.kind === 'node-port') {
    const match = common(portal.port);
    return [
      { table: 'nat', chain: nodePortContainer, args: [...match, ...containerTarget] },
      { table: 'nat', chain: nodePortHost, args: [...match, ...hostTarget] },
      {
        table: 'filter',
        chain: nodePortNonLocal,
        args: [...common(portal.proxyPort), '-m', 'state', '--state', 'NEW', '-j', 'ACCEPT'],
      },
    ];
  }
  const match = [...common(portal.port), '-d', portal.ip as string];
  if (portal.kind === 'external-ip') {
    const notBridged = options.physdev ? ['-m', 'physdev', '!', '--physdev-is-in'] : [];
    return [
      {
        table: 'nat',
        chain: portalsContainer,
        args: [...match, ...notBridged, ...containerTarget],
      },
      { table: 'nat', chain: portalsContainer, args: [...match, ...local, ...containerTarget] },
      { table: 'nat', chain: portalsHost, args: [...match, ...local, ...hostTarget] },
    ];
  }
  return [
    { table: 'nat', chain: portalsContainer, args: [...match, ...containerTarget] },
    { table: 'nat', chain: portalsHost, args: [...match, ...hostTarget] },
  ];
}

/** True when a rule uses the physdev match, which some kernels and namespaces lack. */
export function usesPhysdev(rule: IptablesRule): boolean {
  return rule.args.includes('physdev');
}

/** The rule without its physdev match, for hosts where the match is unavailable. */
export function stripPhysdev(rule: IptablesRule): IptablesRule {
  const i = rule.args.indexOf('physdev');
  if (i < 1 || rule.args[i - 1] !== '-m') return rule;
  return { ...rule, args: [...rule.args.slice(0, i - 1), ...rule.args.slice(i + 3)] };
}

const NOT_FOUND =
  /No chain\/target\/match by that name|does a matching rule exist|does not exist|Couldn't load target/i;

/**
 * True when a failed -C/-D/-F/-X says the rule or chain is not there (legacy and nft back ends word
 * it differently), which removal treats as done.
 */
export function isIptablesNotFound(result: CommandResult): boolean {
  return result.code !== 0 && NOT_FOUND.test(commandOutput(result));
}

/** True when there can be nothing of ours: no such program, or no such table (IPv6 NAT missing). */
export function isIptablesUnavailable(result: CommandResult): boolean {
  return isCommandNotFound(result) || /Table does not exist/i.test(commandOutput(result));
}

/** "ns/web:http (cluster-ip 10.96.0.10:80/TCP)": how a portal is named in errors and logs. */
export function describePortal(portal: Portal): string {
  const p = portal as Partial<Portal> | null;
  const name =
    typeof p?.service === 'object' && p.service !== null ? servicePortNameString(p.service) : '?';
  return `${name} (${String(p?.kind)} ${p?.ip ?? '*'}:${p?.port}/${p?.protocol})`;
}

/** What identifies a portal's rules: everything they are made from. */
export function portalKey(p: Portal): string {
  const name = servicePortNameString(p.service);
  return JSON.stringify([name, p.kind, p.protocol, p.ip, p.port, p.proxyIP, p.proxyPort]);
}
