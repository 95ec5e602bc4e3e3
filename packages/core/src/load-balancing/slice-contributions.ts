import { isIP } from 'node:net';
import type { Logger } from '../logger.js';
import type { EndpointPort, EndpointSlice, Endpoints, Protocol } from '../model/model.js';
import { endpointString, isValidPort } from './endpoints-map.js';

/**
 * The merge rules of EndpointSliceMerger, as pure functions: what one slice contributes (parsed once,
 * when it arrives), how the contributions of a Service's slices combine into per-port endpoint lists,
 * and the Endpoints-shaped object that carries exactly those lists.
 */

/** What one slice contributes, parsed once when it arrives so that merging never re-validates. */
export interface SliceContribution {
  /** The slice's ports that have a number. */
  ports: { name: string; port: number; protocol: Protocol | undefined }[];
  /** First address of each ready endpoint. */
  ready: string[];
  /** First address of each endpoint that is not ready but serving and terminating. */
  terminating: string[];
}

/** Per port name, per port number: the protocol and the IPs. */
type PortGroups = Map<string, Map<number, { protocol: Protocol | undefined; ips: Set<string> }>>;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/**
 * What a slice (IPv4 or IPv6; the caller drops FQDN ones) contributes: its numbered ports, and the
 * first address of each endpoint that is ready (an absent or null condition counts as ready) or else
 * serving and terminating. Endpoints without an address of the slice's family are skipped, with one
 * debug line. Throws only for a hostile object (a throwing getter); the caller catches.
 */
export function parseSlice(slice: EndpointSlice, key: string, log: Logger): SliceContribution {
  const out: SliceContribution = { ports: [], ready: [], terminating: [] };
  const family: 4 | 6 = slice.addressType === 'IPv6' ? 6 : 4;
  const ports: unknown = slice.ports;
  if (Array.isArray(ports)) {
    for (const port of ports as unknown[]) {
      if (!isObject(port) || !isValidPort(port.port)) continue; // no port number: "all ports"
      const name = port.name ?? '';
      if (typeof name !== 'string') continue;
      const protocol =
        port.protocol === 'TCP' || port.protocol === 'UDP' || port.protocol === 'SCTP'
          ? port.protocol
          : undefined;
      out.ports.push({ name, port: port.port, protocol });
    }
  }
  const endpoints: unknown = slice.endpoints;
  if (!Array.isArray(endpoints)) return out;
  let skipped = 0;
  for (const endpoint of endpoints as unknown[]) {
    const ip = isObject(endpoint) ? firstAddress(endpoint.addresses, family) : undefined;
    if (!isObject(endpoint) || ip === undefined) {
      skipped++;
      continue;
    }
    // As in Kubernetes, an absent (or null) condition means ready / serving; anything but a
    // boolean is garbage and never means "send traffic here".
    const c = isObject(endpoint.conditions) ? endpoint.conditions : {};
    if (c.ready == null || c.ready === true) out.ready.push(ip);
    else if ((c.serving == null || c.serving === true) && c.terminating === true) {
      out.terminating.push(ip);
    }
  }
  if (skipped > 0) {
    log.debug(
      `EndpointSlice ${key}: skipped ${skipped} endpoint(s) without a valid IPv${family} address`,
    );
  }
  return out;
}

/** The first address when it is an IP of the slice's family (the API calls addresses fungible). */
function firstAddress(addresses: unknown, family: 4 | 6): string | undefined {
  const ip: unknown = Array.isArray(addresses) ? addresses[0] : undefined;
  return typeof ip === 'string' && isIP(ip) === family ? ip : undefined;
}

/**
 * The merged endpoints of a Service's slices, in one canonical order: per port name the ready
 * endpoints of every slice, or else the serving-and-terminating ones; an address counts once.
 */
export function mergeSlices(slices: Iterable<SliceContribution>): CanonicalView {
  const ready: PortGroups = new Map();
  const terminating: PortGroups = new Map();
  for (const slice of slices) {
    for (const port of slice.ports) {
      addAll(ready, port, slice.ready);
      addAll(terminating, port, slice.terminating);
    }
  }
  for (const [name, byPort] of terminating) {
    if (!ready.has(name)) ready.set(name, byPort);
  }
  return canonical(ready);
}

function addAll(groups: PortGroups, port: SliceContribution['ports'][number], ips: string[]) {
  if (ips.length === 0) return;
  let byPort = groups.get(port.name);
  if (byPort === undefined) {
    byPort = new Map();
    groups.set(port.name, byPort);
  }
  let group = byPort.get(port.port);
  if (group === undefined) {
    group = { protocol: port.protocol, ips: new Set() };
    byPort.set(port.port, group);
  }
  for (const ip of ips) group.ips.add(ip);
}

/** The merged endpoints in one canonical order, from which both outputs are derived. */
export type CanonicalView = {
  name: string;
  ports: { port: number; protocol: Protocol | undefined; ips: string[] }[];
}[];

/** Port names sorted, then port numbers ascending, then IPs sorted: one canonical order. */
function canonical(groups: PortGroups): CanonicalView {
  return [...groups.keys()].sort().map((name) => {
    const byPort = groups.get(name) as NonNullable<ReturnType<PortGroups['get']>>;
    const ports = [...byPort.keys()].sort((a, b) => a - b);
    return {
      name,
      ports: ports.map((port) => {
        const group = byPort.get(port) as { protocol: Protocol | undefined; ips: Set<string> };
        return { port, protocol: group.protocol, ips: [...group.ips].sort() };
      }),
    };
  });
}

/** The lists the synthetic object gives through buildPortsToEndpointsMap, in the same order. */
export function listsOf(view: CanonicalView): Map<string, string[]> {
  const lists = new Map<string, string[]>();
  for (const { name, ports } of view) {
    lists.set(
      name,
      ports.flatMap(({ port, ips }) => ips.map((ip) => endpointString(ip, port))),
    );
  }
  return lists;
}

/**
 * Where a synthetic subset's addresses are: `count` entries of a merged per-name list ("ip:port"
 * strings) from `start`. Non-enumerable properties: JSON, spreading, `structuredClone` and
 * `Object.keys` see the subset as `{ addresses, ports }` only.
 */
const kList = Symbol('userspace-proxy:subset-list');
const kStart = Symbol('userspace-proxy:subset-start');
const kCount = Symbol('userspace-proxy:subset-count');
type EndpointSubset = NonNullable<Endpoints['subsets']>[number];
type LazySubset = EndpointSubset & {
  [kList]: readonly string[];
  [kStart]: number;
  [kCount]: number;
};

/** The host of an "ip:port" / "[ip]:port" endpoint string. */
function hostOf(endpoint: string): string {
  return endpoint.startsWith('[')
    ? endpoint.slice(1, endpoint.lastIndexOf(']'))
    : endpoint.slice(0, endpoint.lastIndexOf(':'));
}

/** Turns `addresses` into a plain data property holding `value` (false when the object is frozen). */
function keepAddresses(subset: EndpointSubset, value: unknown): boolean {
  return Reflect.defineProperty(subset, 'addresses', {
    value,
    writable: true,
    enumerable: true,
    configurable: true,
  });
}

/**
 * The `addresses` of a synthetic subset, made on first read from the merger's lists and then kept
 * as a plain data property: the default balancer never reads them (it shares the lists), so 100 000
 * endpoints no longer hold 100 000 `{ ip }` objects (about 4 MB) for nobody.
 */
const LAZY_ADDRESSES: PropertyDescriptor = {
  get(this: LazySubset): NonNullable<EndpointSubset['addresses']> {
    const list = this[kList];
    const end = this[kStart] + this[kCount];
    const addresses: NonNullable<EndpointSubset['addresses']> = [];
    for (let i = this[kStart]; i < end; i++) addresses.push({ ip: hostOf(list[i] as string) });
    keepAddresses(this, addresses);
    return addresses;
  },
  set(this: LazySubset, value: unknown): void {
    if (!keepAddresses(this, value)) throw new TypeError('addresses cannot be set: frozen');
  },
  enumerable: true,
  configurable: true,
};

function hidden(subset: EndpointSubset, key: symbol, value: unknown): void {
  Object.defineProperty(subset, key, { value, writable: false, enumerable: false });
}

/**
 * One subset per (port name, port number), so different slices may number one name differently.
 * `lists` must be `listsOf(view)`: each subset's `addresses` are read from them when first asked
 * for (see {@link LAZY_ADDRESSES}); otherwise the object is plain data, as any Endpoints.
 */
export function syntheticEndpoints(
  namespace: string,
  name: string,
  view: CanonicalView,
  lists: ReadonlyMap<string, readonly string[]>,
): Endpoints {
  const subsets: NonNullable<Endpoints['subsets']> = [];
  for (const entry of view) {
    const list = lists.get(entry.name) ?? [];
    let start = 0;
    for (const { port, protocol, ips } of entry.ports) {
      // One literal per shape: a field added afterwards takes a property array per port.
      const p: EndpointPort =
        protocol === undefined ? { name: entry.name, port } : { name: entry.name, port, protocol };
      const subset = {} as EndpointSubset;
      Object.defineProperty(subset, 'addresses', LAZY_ADDRESSES);
      subset.ports = [p];
      hidden(subset, kList, list);
      hidden(subset, kStart, start);
      hidden(subset, kCount, ips.length);
      start += ips.length;
      subsets.push(subset);
    }
  }
  return { apiVersion: 'v1', kind: 'Endpoints', metadata: { namespace, name }, subsets };
}

/** True when two sets of per-port lists are equal, order included: nothing to deliver. */
export function sameLists(a: Map<string, string[]>, b: Map<string, string[]>): boolean {
  if (a.size !== b.size) return false;
  for (const [name, list] of a) {
    const other = b.get(name);
    if (other === undefined || other.length !== list.length) return false;
    for (let i = 0; i < list.length; i++) if (list[i] !== other[i]) return false;
  }
  return true;
}
