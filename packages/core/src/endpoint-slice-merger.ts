import { isIP } from 'node:net';
import { isValidPort } from './endpoints-map.js';
import type { EndpointSliceHandler, EndpointsHandler } from './handlers.js';
import { componentLogger, type Logger } from './logger.js';
import {
  type EndpointPort,
  type EndpointSlice,
  type Endpoints,
  type Protocol,
  SERVICE_NAME_LABEL,
} from './model.js';
import { joinHostPort } from './service-port-name.js';

/** Options of {@link EndpointSliceMerger}. */
export interface EndpointSliceMergerOptions {
  /** tslog-compatible; default silent. */
  logger?: Logger;
}

/** What one slice contributes, parsed once when it arrives so that merging never re-validates. */
interface SliceContribution {
  ports: { name: string; port: number; protocol: Protocol | undefined }[];
  /** First address of each ready endpoint. */
  ready: string[];
  /** First address of each endpoint that is not ready but serving and terminating. */
  terminating: string[];
}

/** Everything known about one Service: its slices and what was last delivered for them. */
interface ServiceSlices {
  namespace: string;
  name: string;
  /** Keyed by "ns/slice". */
  slices: Map<string, SliceContribution>;
  /** The merged per-port lists last delivered; undefined before the first delivery. */
  merged: Map<string, string[]> | undefined;
  /** The synthetic Endpoints object last delivered. */
  delivered: Endpoints | undefined;
}

/** Per port name, per port number: the protocol and the IPs. */
type PortGroups = Map<string, Map<number, { protocol: Protocol | undefined; ips: Set<string> }>>;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/**
 * Merges the EndpointSlices of each Service into one Endpoints-shaped object and hands it to an
 * {@link EndpointsHandler} (the load balancer), so that everything downstream has a single code
 * path whether the source watches EndpointSlices or legacy Endpoints. Kubernetes ≥ 1.21 clusters
 * may serve only EndpointSlices, and a userspace proxy that waited for Endpoints never initialised
 * there (kubernetes#100880); this class is what makes slices first-class.
 *
 * Merge rules, per Service and port name: the ready endpoints of all its slices (an absent `ready`
 * counts as ready, as in Kubernetes); when a port has no ready endpoint, the endpoints that are
 * serving and terminating instead (as current kube-proxy does, so that connections drain to pods
 * shutting down rather than fail); FQDN slices, slice ports without a port number and invalid
 * addresses are ignored; an endpoint's first address is the one used (the API says addresses are
 * fungible); an address listed by several slices counts once.
 *
 * Nothing is delivered when the merged lists did not change, so informer resyncs and slice updates
 * that only touch other fields (hints, zones, node names) cost nothing downstream. Updating one
 * Service costs O(its slices), whatever the number of Services.
 */
export class EndpointSliceMerger implements EndpointSliceHandler {
  readonly #target: EndpointsHandler;
  readonly #log: Logger;
  /** Keyed by "ns/service". */
  readonly #services = new Map<string, ServiceSlices>();
  /** "ns/slice" → the "ns/service" it is stored under, so a delete needs no trustworthy labels. */
  readonly #sliceOwner = new Map<string, string>();

  constructor(target: EndpointsHandler, options: EndpointSliceMergerOptions = {}) {
    this.#target = target;
    this.#log = componentLogger(options.logger, 'endpoint-slice-merger');
  }

  /** Stores the slice and delivers its Service's merged endpoints if they changed. */
  onEndpointSliceAdd(slice: EndpointSlice): void {
    this.#upsert(slice);
  }

  /** As an add: the new slice replaces whatever was stored under its name. */
  onEndpointSliceUpdate(_oldSlice: EndpointSlice, slice: EndpointSlice): void {
    this.#upsert(slice);
  }

  /** Forgets the slice; when it was its Service's last one, the Service's Endpoints are deleted. */
  onEndpointSliceDelete(slice: EndpointSlice): void {
    const key = sliceKey(slice);
    if (key === undefined) return;
    this.#remove(key.key);
  }

  /** Passed on: once slices have synced, the merged Endpoints have too. */
  onEndpointSlicesSynced(): void {
    this.#target.onEndpointsSynced();
  }

  /**
   * The synthetic Endpoints object last delivered for a Service, for inspection and tests; undefined
   * when the Service has no stored slice.
   */
  endpointsFor(namespace: string, name: string): Endpoints | undefined {
    return this.#services.get(`${namespace}/${name}`)?.delivered;
  }

  #upsert(slice: EndpointSlice): void {
    const key = sliceKey(slice);
    if (key === undefined) {
      this.#log.debug('ignoring EndpointSlice without metadata.name');
      return;
    }
    const labels = isObject(key.meta.labels) ? key.meta.labels : {};
    const serviceName = labels[SERVICE_NAME_LABEL];
    if (typeof serviceName !== 'string' || serviceName === '') {
      this.#log.debug(`ignoring EndpointSlice ${key.key}: no ${SERVICE_NAME_LABEL} label`);
      this.#remove(key.key);
      return;
    }
    if (slice.addressType !== 'IPv4' && slice.addressType !== 'IPv6') {
      // FQDN slices name hosts, not addresses: the proxy cannot dial them (neither can kube-proxy).
      this.#log.debug(`ignoring EndpointSlice ${key.key}: addressType is not IPv4 or IPv6`);
      this.#remove(key.key);
      return;
    }
    let contribution: SliceContribution;
    try {
      contribution = parseSlice(slice, key.key, this.#log);
    } catch (error) {
      // Only a hostile object (a throwing getter, a revoked Proxy) gets here.
      this.#log.debug(`ignoring unreadable EndpointSlice ${key.key}`, error);
      this.#remove(key.key);
      return;
    }
    const service = `${key.namespace}/${serviceName}`;
    const previous = this.#sliceOwner.get(key.key);
    if (previous !== undefined && previous !== service) this.#remove(key.key);
    let entry = this.#services.get(service);
    if (entry === undefined) {
      entry = {
        namespace: key.namespace,
        name: serviceName,
        slices: new Map(),
        merged: undefined,
        delivered: undefined,
      };
      this.#services.set(service, entry);
    }
    entry.slices.set(key.key, contribution);
    this.#sliceOwner.set(key.key, service);
    this.#deliver(entry, service);
  }

  #remove(sliceKeyText: string): void {
    const service = this.#sliceOwner.get(sliceKeyText);
    if (service === undefined) return;
    this.#sliceOwner.delete(sliceKeyText);
    const entry = this.#services.get(service);
    if (entry === undefined) return;
    entry.slices.delete(sliceKeyText);
    this.#deliver(entry, service);
  }

  #deliver(entry: ServiceSlices, service: string): void {
    if (entry.slices.size === 0) {
      this.#services.delete(service);
      if (entry.delivered !== undefined)
        this.#call('delete', () => this.#target.onEndpointsDelete(entry.delivered as Endpoints));
      return;
    }
    const view = canonical(mergeSlices(entry.slices.values()));
    const merged = listsOf(view);
    const old = entry.delivered;
    if (old !== undefined && entry.merged !== undefined && sameLists(entry.merged, merged)) return;
    const next = syntheticEndpoints(entry.namespace, entry.name, view);
    entry.merged = merged;
    entry.delivered = next;
    if (old === undefined) this.#call('add', () => this.#target.onEndpointsAdd(next));
    else this.#call('update', () => this.#target.onEndpointsUpdate(old, next));
  }

  /** A throwing target must not leave the merger half-updated or stop the informer. */
  #call(what: string, deliver: () => void): void {
    try {
      deliver();
    } catch (error) {
      this.#log.error(`endpoints handler failed on ${what}`, error);
    }
  }
}

function sliceKey(
  slice: unknown,
): { key: string; namespace: string; name: string; meta: Record<string, unknown> } | undefined {
  try {
    if (!isObject(slice) || !isObject(slice.metadata)) return undefined;
    const meta = slice.metadata;
    if (typeof meta.name !== 'string' || meta.name === '') return undefined;
    // An absent namespace means "default", as validation.ts and the API server have it.
    const namespace =
      typeof meta.namespace === 'string' && meta.namespace !== '' ? meta.namespace : 'default';
    return { key: `${namespace}/${meta.name}`, namespace, name: meta.name, meta };
  } catch {
    return undefined; // a throwing getter: treated as a slice without a name
  }
}

function parseSlice(slice: EndpointSlice, key: string, log: Logger): SliceContribution {
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

function mergeSlices(slices: Iterable<SliceContribution>): PortGroups {
  const ready: PortGroups = new Map();
  const terminating: PortGroups = new Map();
  for (const slice of slices) {
    for (const port of slice.ports) {
      addAll(ready, port, slice.ready);
      addAll(terminating, port, slice.terminating);
    }
  }
  // Per port name: ready endpoints, or else the serving-and-terminating ones.
  for (const [name, byPort] of terminating) {
    if (!ready.has(name)) ready.set(name, byPort);
  }
  return ready;
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
type CanonicalView = {
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
function listsOf(view: CanonicalView): Map<string, string[]> {
  const lists = new Map<string, string[]>();
  for (const { name, ports } of view) {
    lists.set(
      name,
      ports.flatMap(({ port, ips }) => ips.map((ip) => joinHostPort(ip, port))),
    );
  }
  return lists;
}

/** One subset per (port name, port number), so different slices may number one name differently. */
function syntheticEndpoints(namespace: string, name: string, view: CanonicalView): Endpoints {
  const subsets: NonNullable<Endpoints['subsets']> = [];
  for (const entry of view) {
    for (const { port, protocol, ips } of entry.ports) {
      const p: EndpointPort = { name: entry.name, port };
      if (protocol !== undefined) p.protocol = protocol;
      subsets.push({ addresses: ips.map((ip) => ({ ip })), ports: [p] });
    }
  }
  return { apiVersion: 'v1', kind: 'Endpoints', metadata: { namespace, name }, subsets };
}

function sameLists(a: Map<string, string[]>, b: Map<string, string[]>): boolean {
  if (a.size !== b.size) return false;
  for (const [name, list] of a) {
    const other = b.get(name);
    if (other === undefined || other.length !== list.length) return false;
    for (let i = 0; i < list.length; i++) if (list[i] !== other[i]) return false;
  }
  return true;
}
