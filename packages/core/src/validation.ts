import { isIP } from 'node:net';
import { InvalidObjectError } from './errors.js';
import type { EndpointSlice, Endpoints, Protocol, Service } from './model.js';
import { SERVICE_NAME_LABEL } from './model.js';
import { DEFAULT_NAMESPACE, UNKNOWN_KEY } from './object-key.js';

/**
 * Structural validation of the objects a source delivers. Nothing from a source is trusted: a manifest
 * file is hand-written, an integrator's informer may hand over anything, and even API objects reach us
 * through code we do not control. Each validator checks what the proxy relies on, never throws
 * (null, arrays, numbers, cyclic objects, getters or proxies that throw all give `ok: false`), and
 * returns a copy: the input is never mutated, and the copy holds plain data properties read once,
 * so a getter cannot answer differently after validation.
 *
 * Normalisation is deliberately small: an absent namespace becomes "default", an absent Service port
 * protocol becomes "TCP", absent EndpointSlice endpoints become `[]`, and `null` optional fields are
 * dropped. Unknown fields are kept (shallowly) for handlers that read more than the proxy does.
 */

/** The outcome of a validator: the normalised copy, or the reason it was refused. */
export type ValidationResult<T> = { ok: true; value: T } | { ok: false; error: InvalidObjectError };

/** At most this many problems are named in one error, so a garbage object cannot flood the logs. */
const MAX_REASONS = 5;
/** Strings quoted in messages are cut to this length, for the same reason. */
const MAX_QUOTED = 64;

const PROTOCOLS: ReadonlySet<unknown> = new Set<Protocol>(['TCP', 'UDP', 'SCTP']);
const SERVICE_TYPES: ReadonlySet<unknown> = new Set([
  'ClusterIP',
  'NodePort',
  'LoadBalancer',
  'ExternalName',
]);
const AFFINITIES: ReadonlySet<unknown> = new Set(['None', 'ClientIP']);
const ADDRESS_TYPES: ReadonlySet<unknown> = new Set(['IPv4', 'IPv6', 'FQDN']);
const DNS1123_LABEL = /^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$/;

type Rec = Record<string, unknown>;

/** `path.field`, or just `field` at the top of the object. */
function at(path: string, field: string): string {
  return path === '' ? field : `${path}.${field}`;
}

/** Collects problems as "path: message" lines; validation goes on after the first so users see more. */
class Problems {
  readonly list: string[] = [];

  add(path: string, message: string): void {
    this.list.push(`${path}: ${message}`);
  }

  reason(): string {
    const shown = this.list.slice(0, MAX_REASONS).join('; ');
    const more = this.list.length - MAX_REASONS;
    return more > 0 ? `${shown}; and ${more} more problem(s)` : shown;
  }
}

/** A short, log-safe description of any value: never calls user code (toString, getters). */
function describe(value: unknown): string {
  switch (typeof value) {
    case 'undefined':
      return 'nothing';
    case 'string':
      return JSON.stringify(value.length > MAX_QUOTED ? `${value.slice(0, MAX_QUOTED)}…` : value);
    case 'number':
    case 'boolean':
    case 'bigint':
      return String(value);
    case 'symbol':
      return 'a symbol';
    case 'function':
      return 'a function';
    default:
      if (value === null) return 'null';
      try {
        return Array.isArray(value) ? 'an array' : 'an object';
      } catch {
        return 'an unreadable object';
      }
  }
}

function errorName(err: unknown): string {
  return err instanceof Error ? err.name : 'a thrown value';
}

/** True for null and undefined, which both mean "absent" for an optional field (YAML gives null). */
function absent(value: unknown): value is null | undefined {
  return value === undefined || value === null;
}

/** A shallow copy of a plain object, or undefined (with a problem) for anything else. */
function copyRecord(value: unknown, path: string, p: Problems): Rec | undefined {
  try {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      p.add(path, `must be an object, got ${describe(value)}`);
      return undefined;
    }
    const copy: Rec = { ...value };
    for (const key of Object.keys(copy)) if (copy[key] === null) delete copy[key];
    return copy;
  } catch (err) {
    p.add(path, `could not be read (${errorName(err)})`);
    return undefined;
  }
}

/** A copy of an array, or undefined (with a problem) for anything else. */
function copyArray(value: unknown, path: string, p: Problems): unknown[] | undefined {
  try {
    if (!Array.isArray(value)) {
      p.add(path, `must be an array, got ${describe(value)}`);
      return undefined;
    }
    const length = value.length;
    const copy: unknown[] = new Array(length);
    for (let i = 0; i < length; i++) copy[i] = value[i];
    return copy;
  } catch (err) {
    p.add(path, `could not be read (${errorName(err)})`);
    return undefined;
  }
}

/** An array of shallow-copied objects; entries that are not objects are reported by index. */
function copyRecords(value: unknown, path: string, p: Problems): Rec[] | undefined {
  const items = copyArray(value, path, p);
  if (!items) return undefined;
  const out: Rec[] = [];
  items.forEach((item, i) => {
    const copy = copyRecord(item, `${path}[${i}]`, p);
    if (copy) out.push(copy);
  });
  return out.length === items.length ? out : undefined;
}

/** Replaces `rec[field]` with a copied array of objects when present. */
function recordsField(rec: Rec, field: string, path: string, p: Problems): Rec[] | undefined {
  if (absent(rec[field])) return undefined;
  const copy = copyRecords(rec[field], at(path, field), p);
  if (copy) rec[field] = copy;
  return copy;
}

function checkString(rec: Rec, field: string, path: string, p: Problems): void {
  const value = rec[field];
  if (!absent(value) && typeof value !== 'string') {
    p.add(at(path, field), `must be a string, got ${describe(value)}`);
  }
}

function checkOneOf(
  rec: Rec,
  field: string,
  path: string,
  allowed: ReadonlySet<unknown>,
  p: Problems,
): void {
  const value = rec[field];
  if (!absent(value) && !allowed.has(value)) {
    p.add(at(path, field), `must be one of ${[...allowed].join(', ')}, got ${describe(value)}`);
  }
}

function checkInteger(value: unknown, path: string, min: number, max: number, p: Problems): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    p.add(path, `must be an integer between ${min} and ${max}, got ${describe(value)}`);
  }
}

/** A usable IP literal: what node:net accepts, without an IPv6 zone (meaningless for a Service IP). */
function isPlainIP(value: unknown): boolean {
  return typeof value === 'string' && !value.includes('%') && isIP(value) !== 0;
}

function checkIP(value: unknown, path: string, p: Problems, allow: readonly string[] = []): void {
  if (typeof value === 'string' && allow.includes(value)) return;
  if (!isPlainIP(value)) {
    const extra = allow.length > 0 ? ` or ${allow.map((a) => JSON.stringify(a)).join(' or ')}` : '';
    p.add(path, `must be an IP address${extra}, got ${describe(value)}`);
  }
}

/** Copies an array of IP strings held in `rec[field]`, checking each. */
function ipList(rec: Rec, field: string, path: string, p: Problems, allow: string[] = []): void {
  if (absent(rec[field])) return;
  const items = copyArray(rec[field], at(path, field), p);
  if (!items) return;
  items.forEach((ip, i) => {
    checkIP(ip, `${at(path, field)}[${i}]`, p, allow);
  });
  rec[field] = items;
}

/** Copies a Record<string, string> held in `rec[field]` (labels, annotations). */
function stringMap(rec: Rec, field: string, path: string, p: Problems): void {
  if (absent(rec[field])) return;
  const copy = copyRecord(rec[field], at(path, field), p);
  if (!copy) return;
  for (const [k, v] of Object.entries(copy)) {
    if (typeof v !== 'string')
      p.add(`${at(path, field)}[${JSON.stringify(k)}]`, `must be a string, got ${describe(v)}`);
  }
  rec[field] = copy;
}

/** Checks and copies `metadata`; returns the copy with the namespace defaulted. */
function checkMetadata(obj: Rec, p: Problems): Rec | undefined {
  const meta = copyRecord(obj.metadata, 'metadata', p);
  if (!meta) return undefined;
  const { name, namespace } = meta;
  if (typeof name !== 'string' || name === '') {
    p.add('metadata.name', `must be a non-empty string, got ${describe(name)}`);
  } else if (name.length > 253 || !DNS1123_SUBDOMAIN.test(name)) {
    p.add(
      'metadata.name',
      `must be a DNS-1123 name (lower-case alphanumerics, "-", "."), got ${describe(name)}`,
    );
  }
  if (absent(namespace) || namespace === '') {
    meta.namespace = DEFAULT_NAMESPACE;
  } else if (
    typeof namespace !== 'string' ||
    namespace.length > 63 ||
    !DNS1123_LABEL.test(namespace)
  ) {
    p.add(
      'metadata.namespace',
      `must be a DNS-1123 label (lower-case alphanumerics and "-"), got ${describe(namespace)}`,
    );
  }
  checkString(meta, 'uid', 'metadata', p);
  checkString(meta, 'resourceVersion', 'metadata', p);
  stringMap(meta, 'labels', 'metadata', p);
  stringMap(meta, 'annotations', 'metadata', p);
  return meta;
}

/** The key named in an error: "ns/name" when both can be shown, a placeholder otherwise. */
function displayKey(meta: Rec | undefined): string {
  if (!meta) return UNKNOWN_KEY;
  const ns = typeof meta.namespace === 'string' ? meta.namespace : DEFAULT_NAMESPACE;
  const name = meta.name;
  const safe = (s: string) => (/^[-a-z0-9.]{1,253}$/.test(s) ? s : describe(s));
  return typeof name === 'string' && name !== ''
    ? `${safe(ns)}/${safe(name)}`
    : `${safe(ns)}/<unnamed>`;
}

/**
 * Runs `check` on a shallow copy of `obj`; any throw is turned into a problem, so a validator never
 * throws. The copy is what `check` fills in and what is returned.
 */
function run<T>(
  kind: string,
  obj: unknown,
  check: (copy: Rec, p: Problems) => Rec | undefined,
): ValidationResult<T> {
  const p = new Problems();
  let meta: Rec | undefined;
  let copy: Rec | undefined;
  try {
    copy = copyRecord(obj, kind, p);
    if (copy) meta = check(copy, p);
  } catch (err) {
    p.add(kind, `could not be read (${errorName(err)})`);
  }
  if (p.list.length > 0 || !copy) {
    return { ok: false, error: new InvalidObjectError(kind, displayKey(meta), p.reason()) };
  }
  return { ok: true, value: copy as unknown as T };
}

function checkServicePorts(spec: Rec, p: Problems): void {
  const ports = recordsField(spec, 'ports', 'spec', p);
  if (!ports) return;
  const names = new Set<string>();
  ports.forEach((port, i) => {
    const path = `spec.ports[${i}]`;
    checkInteger(port.port, `${path}.port`, 1, 65_535, p);
    if (absent(port.protocol)) port.protocol = 'TCP';
    else checkOneOf(port, 'protocol', path, PROTOCOLS, p);
    if (!absent(port.nodePort)) checkInteger(port.nodePort, `${path}.nodePort`, 0, 65_535, p);
    const name = absent(port.name) ? '' : port.name;
    if (typeof name !== 'string') {
      p.add(`${path}.name`, `must be a string, got ${describe(name)}`);
    } else if (name === '') {
      if (ports.length > 1)
        p.add(`${path}.name`, 'must be non-empty when a Service has more than one port');
    } else if (name.length > 63 || !DNS1123_LABEL.test(name)) {
      p.add(
        `${path}.name`,
        `must be a DNS-1123 label (lower-case alphanumerics and "-"), got ${describe(name)}`,
      );
    } else if (names.has(name)) {
      p.add(`${path}.name`, `duplicate port name ${describe(name)}; port names must be unique`);
    } else {
      names.add(name);
    }
  });
}

function checkServiceSpec(obj: Rec, p: Problems): void {
  const spec = copyRecord(obj.spec, 'spec', p);
  if (!spec) return;
  obj.spec = spec;
  checkOneOf(spec, 'type', 'spec', SERVICE_TYPES, p);
  if (!absent(spec.clusterIP)) checkIP(spec.clusterIP, 'spec.clusterIP', p, ['', 'None']);
  ipList(spec, 'clusterIPs', 'spec', p, ['None']);
  checkServicePorts(spec, p);
  ipList(spec, 'externalIPs', 'spec', p);
  checkOneOf(spec, 'sessionAffinity', 'spec', AFFINITIES, p);
  if (!absent(spec.sessionAffinityConfig)) {
    const config = copyRecord(spec.sessionAffinityConfig, 'spec.sessionAffinityConfig', p);
    if (config) {
      spec.sessionAffinityConfig = config;
      if (!absent(config.clientIP)) {
        const path = 'spec.sessionAffinityConfig.clientIP';
        const clientIP = copyRecord(config.clientIP, path, p);
        if (clientIP) {
          config.clientIP = clientIP;
          const timeout = clientIP.timeoutSeconds;
          if (!absent(timeout)) checkInteger(timeout, `${path}.timeoutSeconds`, 1, 86_400, p);
        }
      }
    }
  }
  if (!absent(spec.loadBalancerSourceRanges)) {
    const ranges = copyArray(spec.loadBalancerSourceRanges, 'spec.loadBalancerSourceRanges', p);
    if (ranges) {
      spec.loadBalancerSourceRanges = ranges;
      ranges.forEach((r, i) => {
        if (typeof r !== 'string')
          p.add(`spec.loadBalancerSourceRanges[${i}]`, `must be a string, got ${describe(r)}`);
      });
    }
  }
}

function checkServiceStatus(obj: Rec, p: Problems): void {
  if (absent(obj.status)) return;
  const status = copyRecord(obj.status, 'status', p);
  if (!status) return;
  obj.status = status;
  if (absent(status.loadBalancer)) return;
  const lb = copyRecord(status.loadBalancer, 'status.loadBalancer', p);
  if (!lb) return;
  status.loadBalancer = lb;
  const ingress = recordsField(lb, 'ingress', 'status.loadBalancer', p);
  ingress?.forEach((entry, i) => {
    const path = `status.loadBalancer.ingress[${i}]`;
    if (!absent(entry.ip)) checkIP(entry.ip, `${path}.ip`, p);
    checkString(entry, 'hostname', path, p);
  });
}

/**
 * Checks a Service: metadata (name, namespace defaulted to "default", labels and annotations string
 * maps), `spec` (type, clusterIP "" / "None" / an IP, clusterIPs, ports: integer port 1..65535,
 * protocol TCP/UDP/SCTP defaulted to TCP, nodePort 0..65535, names DNS labels, non-empty and unique
 * when there is more than one port; externalIPs; sessionAffinity None/ClientIP; timeoutSeconds
 * 1..86400) and `status.loadBalancer.ingress[].ip`. `targetPort` is not checked: the proxy never
 * reads it (endpoints carry the port).
 */
export function validateService(obj: unknown): ValidationResult<Service> {
  return run<Service>('Service', obj, (copy, p) => {
    const meta = checkMetadata(copy, p);
    if (meta) copy.metadata = meta;
    checkServiceSpec(copy, p);
    checkServiceStatus(copy, p);
    return meta;
  });
}

/**
 * Checks legacy Endpoints: metadata, and the shape of `subsets` (an array of objects whose
 * `addresses`, `notReadyAddresses` and `ports` are arrays of objects). Leaves are not checked: an
 * address without a usable IP or a port that is not positive is skipped per entry when endpoint lists
 * are built, so one bad address never takes the others down.
 */
export function validateEndpoints(obj: unknown): ValidationResult<Endpoints> {
  return run<Endpoints>('Endpoints', obj, (copy, p) => {
    const meta = checkMetadata(copy, p);
    if (meta) copy.metadata = meta;
    const subsets = recordsField(copy, 'subsets', '', p);
    subsets?.forEach((subset, i) => {
      const path = `subsets[${i}]`;
      recordsField(subset, 'addresses', path, p);
      recordsField(subset, 'notReadyAddresses', path, p);
      recordsField(subset, 'ports', path, p);
    });
    return meta;
  });
}

/**
 * Checks an EndpointSlice: metadata with a non-empty `kubernetes.io/service-name` label (a slice
 * without one belongs to no Service), `addressType` IPv4/IPv6/FQDN, `endpoints` an array of objects
 * (absent means `[]`) each with an `addresses` array and an optional `conditions` object, and `ports`
 * an array of objects. Leaves (address strings, port numbers) are skipped per entry later, as for
 * Endpoints.
 */
export function validateEndpointSlice(obj: unknown): ValidationResult<EndpointSlice> {
  return run<EndpointSlice>('EndpointSlice', obj, (copy, p) => {
    const meta = checkMetadata(copy, p);
    if (meta) {
      copy.metadata = meta;
      const labels = meta.labels as Rec | undefined;
      const service = typeof labels === 'object' ? labels[SERVICE_NAME_LABEL] : undefined;
      if (typeof service !== 'string' || service === '') {
        p.add(
          `metadata.labels[${JSON.stringify(SERVICE_NAME_LABEL)}]`,
          `must name the Service, got ${describe(service)}`,
        );
      }
    }
    if (absent(copy.addressType))
      p.add('addressType', 'must be one of IPv4, IPv6, FQDN, got nothing');
    else checkOneOf(copy, 'addressType', '', ADDRESS_TYPES, p);
    if (absent(copy.endpoints)) copy.endpoints = [];
    const endpoints = recordsField(copy, 'endpoints', '', p);
    endpoints?.forEach((endpoint, i) => {
      const path = `endpoints[${i}]`;
      const addresses = copyArray(endpoint.addresses, `${path}.addresses`, p);
      if (addresses) endpoint.addresses = addresses;
      if (!absent(endpoint.conditions)) {
        const conditions = copyRecord(endpoint.conditions, `${path}.conditions`, p);
        if (conditions) endpoint.conditions = conditions;
      }
    });
    recordsField(copy, 'ports', '', p);
    return meta;
  });
}
