import { isIP } from 'node:net';
import type { Logger } from '../logger.js';
import type { Endpoints } from '../model/model.js';

/**
 * A DNS-1123 label. The reference never validates endpoint hosts and its tests use names such as
 * "endpoint1", so a single label is accepted beside IP literals; anything with dots that is not an IP
 * ("1.2.3.999"), spaces, slashes or a colon is garbage that would only fail later, at dial time.
 */
const DNS_LABEL = /^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$/;

/**
 * True for what may stand as the host of an endpoint: an IPv4 or IPv6 literal, or a DNS label.
 * Exported so that other producers of endpoint strings apply the same rule.
 */
export function isValidEndpointHost(host: unknown): host is string {
  return typeof host === 'string' && (isIP(host) !== 0 || DNS_LABEL.test(host));
}

/** True for an integer port a client can dial (1..65535). */
export function isValidPort(port: unknown): port is number {
  return typeof port === 'number' && Number.isInteger(port) && port >= 1 && port <= 65_535;
}

/**
 * "host:port" ("[host]:port" for IPv6) as one flat string, as `joinHostPort` spells it. A template
 * or `+` makes a rope of two concatenations (64 bytes at "10.1.2.3:8080" and up); `join` makes one
 * flat string (40 bytes). Endpoint lists hold one per endpoint and port, 100 000 and more in a large
 * cluster, for as long as the endpoint exists.
 */
export function endpointString(host: string, port: number): string {
  return host.includes(':') ? ['[', host, ']:', port].join('') : [host, port].join(':');
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/**
 * The lists of Endpoints objects whose maker already built them (the slice merger's synthetic
 * objects: `listsOf`), so that turning such an object into lists again shares the merger's arrays
 * and "ip:port" strings instead of making a second set. At 100 000 endpoints a set is about 10 MB.
 */
const knownLists = new WeakMap<object, ReadonlyMap<string, readonly string[]>>();

/**
 * Records that `endpoints` gives exactly `lists` through {@link buildPortsToEndpointsMap}, which then
 * returns them (in a new Map) without reading the object. The lists are frozen: they are shared.
 */
export function rememberEndpointLists(endpoints: Endpoints, lists: Map<string, string[]>): void {
  for (const list of lists.values()) Object.freeze(list);
  knownLists.set(endpoints, lists);
}

/**
 * Turns an Endpoints object into per-port-name endpoint lists ("ip:port" strings), the form the load
 * balancer balances over [BuildPortsToEndpointsMap].
 *
 * As in the reference: only ready `addresses` count (`notReadyAddresses` never receive traffic); the
 * order is subsets × ports × addresses; several ports sharing one name accumulate under that name;
 * a port name with no valid entry is absent. Unlike the reference, an endpoint string appears at
 * most once per name (a duplicate would silently double that endpoint's share of the round robin),
 * and the object is treated as untrusted: a malformed subset, port or address is skipped with a debug
 * log and the rest is kept. It never throws, whatever it is given.
 */
export function buildPortsToEndpointsMap(
  endpoints: Endpoints,
  logger?: Logger,
): Map<string, string[]> {
  const known = knownLists.get(endpoints);
  // Shared lists are frozen: the caller may replace them in its Map, never change them.
  if (known !== undefined) return new Map(known as Map<string, string[]>);
  const result = new Map<string, string[]>();
  try {
    collect(endpoints, result, logger);
  } catch (error) {
    // Only a hostile object (a throwing getter, a revoked Proxy) gets here; keep nothing of it.
    logger?.debug('ignoring unreadable Endpoints object', error);
    result.clear();
  }
  return result;
}

function collect(endpoints: unknown, result: Map<string, string[]>, logger?: Logger): void {
  if (!isObject(endpoints)) {
    logger?.debug('ignoring Endpoints: not an object');
    return;
  }
  const subsets = endpoints.subsets;
  if (subsets === undefined || subsets === null) return;
  const what = describe(endpoints);
  if (!Array.isArray(subsets)) {
    logger?.debug(`ignoring ${what}: subsets is not an array`);
    return;
  }
  const seen = new Map<string, Set<string>>();
  subsets.forEach((subset: unknown, s) => {
    if (!isObject(subset)) {
      logger?.debug(`ignoring ${what} subsets[${s}]: not an object`);
      return;
    }
    const ports = validPorts(subset.ports, `${what} subsets[${s}]`, logger);
    const hosts = validHosts(subset.addresses, `${what} subsets[${s}]`, logger);
    for (const { name, port } of ports) {
      let list = result.get(name);
      let names = seen.get(name);
      for (const host of hosts) {
        const endpoint = endpointString(host, port);
        if (names?.has(endpoint)) continue;
        if (list === undefined || names === undefined) {
          list = [];
          names = new Set();
          result.set(name, list);
          seen.set(name, names);
        }
        list.push(endpoint);
        names.add(endpoint);
      }
    }
  });
}

function validPorts(
  ports: unknown,
  where: string,
  logger?: Logger,
): { name: string; port: number }[] {
  if (ports === undefined || ports === null) return [];
  if (!Array.isArray(ports)) {
    logger?.debug(`skipping ${where}: ports is not an array`);
    return [];
  }
  const out: { name: string; port: number }[] = [];
  ports.forEach((entry: unknown, p) => {
    if (!isObject(entry)) {
      logger?.debug(`skipping ${where}.ports[${p}]: not an object`);
      return;
    }
    const name = entry.name ?? '';
    if (typeof name !== 'string') {
      logger?.debug(`skipping ${where}.ports[${p}]: name is not a string`);
      return;
    }
    // Port 0 (unset) is skipped silently, as the reference does; anything else invalid is logged.
    if (entry.port === 0) return;
    if (!isValidPort(entry.port)) {
      logger?.debug(`skipping ${where}.ports[${p}]: invalid port ${show(entry.port)}`);
      return;
    }
    out.push({ name, port: entry.port });
  });
  return out;
}

function validHosts(addresses: unknown, where: string, logger?: Logger): string[] {
  if (addresses === undefined || addresses === null) return [];
  if (!Array.isArray(addresses)) {
    logger?.debug(`skipping ${where}: addresses is not an array`);
    return [];
  }
  const out: string[] = [];
  addresses.forEach((entry: unknown, a) => {
    const ip = isObject(entry) ? entry.ip : undefined;
    // An empty ip is skipped silently, as the reference does.
    if (ip === '') return;
    if (!isValidEndpointHost(ip)) {
      logger?.debug(`skipping ${where}.addresses[${a}]: invalid ip ${show(ip)}`);
      return;
    }
    out.push(ip);
  });
  return out;
}

/** A short, never-throwing rendering of an untrusted value for a log line. */
function show(value: unknown): string {
  if (typeof value === 'string')
    return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
  if (typeof value === 'object' && value !== null)
    return Array.isArray(value) ? 'an array' : 'an object';
  if (typeof value === 'function' || typeof value === 'symbol') return `a ${typeof value}`;
  return String(value);
}

function describe(endpoints: Record<string, unknown>): string {
  const meta = isObject(endpoints.metadata) ? endpoints.metadata : {};
  const ns = typeof meta.namespace === 'string' ? meta.namespace : '';
  const name = typeof meta.name === 'string' ? meta.name : '';
  return `Endpoints ${ns}/${name}`;
}
