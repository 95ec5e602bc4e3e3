import { BlockList, isIP } from 'node:net';
import { channels } from '../diagnostics.js';
import type { InvalidObjectError } from '../errors.js';
import type { Logger } from '../logger.js';
import { LOG_MESSAGE_MAX_CHARS, logSafe } from './log-safe.js';
import type { EndpointSlice, Endpoints, Protocol, Service } from './model.js';
import { SERVICE_NAME_LABEL } from './model.js';
import { PROXY_PROTOCOL_ANNOTATION, PROXY_PROTOCOL_VERSIONS } from './proxy-protocol-annotation.js';
import {
  absent,
  at,
  checkBoolean,
  checkCount,
  checkInteger,
  checkOneOf,
  checkPortName,
  checkString,
  copyArray,
  copyRecord,
  DNS1123_SUBDOMAIN,
  describe,
  type Problems,
  type Rec,
  recordField,
  recordsField,
  validator,
} from './validation-support.js';

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

export type { ValidateOptions, ValidationResult } from './validation-support.js';

/**
 * Addresses no Service or endpoint may use: the unspecified address (a listener on it takes the port
 * on every address of the host), multicast and the IPv4 limited broadcast (never a unicast
 * destination; a listener on 255.255.255.255 would be a trap). The API server refuses them for
 * external IPs and endpoints; the proxy refuses them for every Service IP and endpoint, whatever the
 * source. Loopback stays allowed (unlike the API server's endpoint check): a standalone proxy's
 * backends are often local.
 */
const NOT_A_SERVICE_IP = new BlockList();
NOT_A_SERVICE_IP.addAddress('0.0.0.0', 'ipv4');
NOT_A_SERVICE_IP.addSubnet('224.0.0.0', 4, 'ipv4');
NOT_A_SERVICE_IP.addAddress('255.255.255.255', 'ipv4');
NOT_A_SERVICE_IP.addAddress('::', 'ipv6');
NOT_A_SERVICE_IP.addSubnet('ff00::', 8, 'ipv6');

/** The longest IP literal: an IPv6 address with an embedded IPv4 part. */
const MAX_IP_LENGTH = 45;

/**
 * Checks an endpoint address: an IP literal of `family` (4, 6, or 0 for either), without a zone,
 * neither unspecified, multicast nor broadcast. Long strings are refused before any parsing.
 */
function checkEndpointIP(value: unknown, family: 0 | 4 | 6, path: string, p: Problems): void {
  const found =
    typeof value === 'string' && value.length <= MAX_IP_LENGTH && !value.includes('%')
      ? isIP(value)
      : 0;
  const wanted = family === 0 ? 'an IP address' : `an IPv${family} address`;
  if (found === 0 || (family !== 0 && found !== family)) {
    p.add(path, `must be ${wanted}, got ${describe(value)}`);
  } else if (NOT_A_SERVICE_IP.check(value as string, found === 4 ? 'ipv4' : 'ipv6')) {
    p.add(
      path,
      `must be a unicast address (not unspecified, multicast or broadcast), got ${describe(value)}`,
    );
  }
}

/**
 * The API's IANA_SVC_NAME, what a named `targetPort` must be: at most 15 lower-case alphanumerics
 * and "-", at least one letter, no "-" at either end or twice in a row.
 */
const IANA_SVC_NAME = /^(?=.*[a-z])[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]$|^[a-z]$/;

/** Checks `targetPort`: an integer 1..65535 or an IANA service name (a container port's name). */
function checkTargetPort(value: unknown, path: string, p: Problems): void {
  if (absent(value)) return;
  if (typeof value === 'number') {
    checkInteger(value, path, 1, 65_535, p);
  } else if (typeof value !== 'string' || value.length > 15 || !IANA_SVC_NAME.test(value)) {
    p.add(
      path,
      `must be an integer between 1 and 65535 or a port name (at most 15 lower-case alphanumerics and "-"), got ${describe(value)}`,
    );
  }
}

/** Whether `text` (spaces around it allowed, as kube-proxy trims them) is an IP CIDR. */
function isCidr(text: string): boolean {
  const trimmed = text.trim();
  const slash = trimmed.indexOf('/');
  if (slash < 0 || trimmed.length > MAX_IP_LENGTH + 4) return false;
  const family = isIP(trimmed.slice(0, slash));
  const prefix = trimmed.slice(slash + 1);
  return family !== 0 && /^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128);
}

/**
 * Checks an address a Service is reached on: an IP literal as node:net reads it, without an IPv6 zone
 * (meaningless for a Service IP), and neither unspecified nor multicast; or one of `allow`.
 */
function checkServiceIP(
  value: unknown,
  path: string,
  p: Problems,
  allow: readonly string[] = [],
): void {
  if (typeof value === 'string' && allow.includes(value)) return;
  const family = typeof value === 'string' && !value.includes('%') ? isIP(value) : 0;
  if (family === 0) {
    const extra = allow.length > 0 ? ` or ${allow.map((a) => JSON.stringify(a)).join(' or ')}` : '';
    p.add(path, `must be an IP address${extra}, got ${describe(value)}`);
  } else if (NOT_A_SERVICE_IP.check(value as string, family === 4 ? 'ipv4' : 'ipv6')) {
    p.add(path, `must be a unicast address (not unspecified or multicast), got ${describe(value)}`);
  }
}

/** Copies an array of Service IPs held in `rec[field]`, checking each. */
function serviceIPList(
  rec: Rec,
  field: string,
  path: string,
  p: Problems,
  allow: string[] = [],
): void {
  if (absent(rec[field])) return;
  const items = copyArray(rec[field], at(path, field), p);
  if (!items) return;
  items.forEach((ip, i) => {
    checkServiceIP(ip, `${at(path, field)}[${i}]`, p, allow);
  });
  rec[field] = items;
}

const PROTOCOLS: ReadonlySet<unknown> = new Set<Protocol>(['TCP', 'UDP', 'SCTP']);
const SERVICE_TYPES: ReadonlySet<unknown> = new Set([
  'ClusterIP',
  'NodePort',
  'LoadBalancer',
  'ExternalName',
]);
const AFFINITIES: ReadonlySet<unknown> = new Set(['None', 'ClientIP']);
const ADDRESS_TYPES: ReadonlySet<unknown> = new Set(['IPv4', 'IPv6', 'FQDN']);

/** How much of a kind is logged: every kind the proxy knows is far shorter. */
const MAX_KIND_CHARS = 64;

/**
 * Logs a refused object (one warning naming its kind, key and the reason) and publishes it on
 * `userspace-proxy:object:rejected`: the one way every consumer reports what it ignored, so the
 * daemon's metric counts every rejection wherever it happened. The kind, key and reason may come
 * from input (an integrator's error, a tombstone's key), so each is made log-safe (escaped,
 * truncated) here, for the log line and the channel alike, whoever built the error.
 */
export function reportInvalidObject(log: Logger, error: InvalidObjectError): void {
  const kind = logSafe(String(error.kind), MAX_KIND_CHARS);
  const key = logSafe(String(error.key));
  const reason = logSafe(String(error.reason), LOG_MESSAGE_MAX_CHARS);
  log.warn(`ignoring ${kind} ${key}: ${reason}`);
  if (channels.objectRejected.hasSubscribers) {
    channels.objectRejected.publish({ kind, key, reason });
  }
}

function checkServicePorts(spec: Rec, p: Problems): void {
  const ports = recordsField(spec, 'ports', 'spec', p);
  if (!ports) return;
  const names = new Set<string>();
  /** "port/PROTO" and "nodePort/PROTO" seen: the API refuses two ports that would share a socket. */
  const taken = new Set<string>();
  const once = (key: string, path: string, what: string) => {
    if (taken.has(key)) p.add(path, `duplicate ${what}; each must be unique per protocol`);
    taken.add(key);
  };
  ports.forEach((port, i) => {
    const path = `spec.ports[${i}]`;
    checkInteger(port.port, `${path}.port`, 1, 65_535, p);
    if (absent(port.protocol)) port.protocol = 'TCP';
    else checkOneOf(port, 'protocol', path, PROTOCOLS, p);
    if (!absent(port.nodePort)) checkInteger(port.nodePort, `${path}.nodePort`, 0, 65_535, p);
    checkTargetPort(port.targetPort, `${path}.targetPort`, p);
    if (typeof port.port === 'number')
      once(`${port.port}/${port.protocol}`, path, `port ${port.port}/${port.protocol}`);
    if (typeof port.nodePort === 'number' && port.nodePort !== 0)
      once(
        `node ${port.nodePort}/${port.protocol}`,
        `${path}.nodePort`,
        `node port ${port.nodePort}/${port.protocol}`,
      );
    checkPortName(port.name, `${path}.name`, ports.length === 1, names, p);
  });
}

function checkServiceSpec(obj: Rec, p: Problems): void {
  const spec = copyRecord(obj.spec, 'spec', p);
  if (!spec) return;
  obj.spec = spec;
  checkOneOf(spec, 'type', 'spec', SERVICE_TYPES, p);
  if (!absent(spec.clusterIP)) checkServiceIP(spec.clusterIP, 'spec.clusterIP', p, ['', 'None']);
  serviceIPList(spec, 'clusterIPs', 'spec', p, ['None']);
  checkServicePorts(spec, p);
  serviceIPList(spec, 'externalIPs', 'spec', p);
  checkOneOf(spec, 'sessionAffinity', 'spec', AFFINITIES, p);
  const clientIP = recordField(
    recordField(spec, 'sessionAffinityConfig', 'spec', p) ?? {},
    'clientIP',
    'spec.sessionAffinityConfig',
    p,
  );
  if (clientIP && !absent(clientIP.timeoutSeconds)) {
    const path = 'spec.sessionAffinityConfig.clientIP.timeoutSeconds';
    checkInteger(clientIP.timeoutSeconds, path, 1, 86_400, p);
  }
  if (!absent(spec.loadBalancerSourceRanges)) {
    const ranges = copyArray(spec.loadBalancerSourceRanges, 'spec.loadBalancerSourceRanges', p);
    if (ranges) {
      spec.loadBalancerSourceRanges = ranges;
      ranges.forEach((r, i) => {
        if (typeof r !== 'string' || !isCidr(r))
          p.add(`spec.loadBalancerSourceRanges[${i}]`, `must be an IP CIDR, got ${describe(r)}`);
      });
    }
  }
}

function checkServiceStatus(obj: Rec, p: Problems): void {
  const lb = recordField(recordField(obj, 'status', '', p) ?? {}, 'loadBalancer', 'status', p);
  const ingress = lb && recordsField(lb, 'ingress', 'status.loadBalancer', p);
  ingress?.forEach((entry, i) => {
    const path = `status.loadBalancer.ingress[${i}]`;
    if (!absent(entry.ip)) checkServiceIP(entry.ip, `${path}.ip`, p);
    checkString(entry, 'hostname', path, p);
  });
}

/**
 * Checks the proxy's own annotation: `userspace-proxy.io/proxy-protocol` is `v1` or `v2` when set. A
 * bad value refuses the Service (it keeps what was last served for it): serving it without the
 * header a backend was promised, or with one it does not expect, would both break it silently.
 */
function checkProxyProtocol(meta: Rec | undefined, p: Problems): void {
  const annotations = meta?.annotations;
  if (typeof annotations !== 'object' || annotations === null) return;
  const value = (annotations as Rec)[PROXY_PROTOCOL_ANNOTATION];
  if (value === undefined || PROXY_PROTOCOL_VERSIONS.includes(value as 'v1')) return;
  p.add(
    `metadata.annotations[${JSON.stringify(PROXY_PROTOCOL_ANNOTATION)}]`,
    `must be one of ${PROXY_PROTOCOL_VERSIONS.join(', ')}, got ${describe(value)}`,
  );
}

/**
 * Checks a Service: metadata (name, namespace defaulted to "default", labels and annotations string
 * maps), `spec` (type, clusterIP "" / "None" / an IP, clusterIPs, ports: integer port 1..65535,
 * protocol TCP/UDP/SCTP defaulted to TCP, nodePort 0..65535, names DNS labels, non-empty and unique
 * when there is more than one port, no port or node port twice per protocol; targetPort 1..65535 or
 * a port name, checked although the proxy never reads it, so a manifest fails as the API server
 * would fail it; externalIPs; sessionAffinity None/ClientIP; timeoutSeconds 1..86400;
 * loadBalancerSourceRanges CIDRs) and `status.loadBalancer.ingress[].ip`. Service IPs may be neither
 * the unspecified address, multicast nor the IPv4 broadcast address. The
 * `userspace-proxy.io/proxy-protocol` annotation, when set, is `v1` or `v2`.
 */
export const validateService = validator<Service>('Service', (copy, meta, p) => {
  checkProxyProtocol(meta, p);
  checkServiceSpec(copy, p);
  checkServiceStatus(copy, p);
});

/** The API's bounds on one EndpointSlice. */
const MAX_SLICE_ENDPOINTS = 1000;
const MAX_ENDPOINT_ADDRESSES = 100;
const MAX_SLICE_PORTS = 20_000;

/** Checks the ports of an Endpoints subset or an EndpointSlice: number, protocol, name. */
function checkEndpointPorts(ports: Rec[], path: string, p: Problems): void {
  const names = new Set<string>();
  ports.forEach((port, i) => {
    const at = `${path}[${i}]`;
    checkInteger(port.port, `${at}.port`, 1, 65_535, p);
    checkOneOf(port, 'protocol', at, PROTOCOLS, p);
    checkPortName(port.name, `${at}.name`, ports.length === 1, names, p);
    checkString(port, 'appProtocol', at, p);
  });
}

/** Checks legacy Endpoints addresses: `ip` an IP, `hostname` a DNS label, `nodeName` bounded. */
function checkEndpointAddresses(addresses: Rec[] | undefined, path: string, p: Problems): void {
  addresses?.forEach((address, i) => {
    const at = `${path}[${i}]`;
    checkEndpointIP(address.ip, 0, `${at}.ip`, p);
    checkString(address, 'hostname', at, p, 63);
    checkString(address, 'nodeName', at, p);
  });
}

/**
 * Checks legacy Endpoints as the API server does: metadata; `subsets` an array of objects whose
 * `addresses` and `notReadyAddresses` hold objects with `ip` an IP (either family; neither
 * unspecified, multicast nor broadcast) and bounded `hostname` / `nodeName`, and whose `ports` hold
 * objects with `port` an integer 1..65535, `protocol` TCP/UDP/SCTP when given, and `name` a DNS-1123
 * label, required and unique when a subset has several ports. One bad leaf refuses the whole object,
 * with its field path, as the API server would have.
 */
export const validateEndpoints = validator<Endpoints>('Endpoints', (copy, _meta, p) => {
  const subsets = recordsField(copy, 'subsets', '', p);
  subsets?.forEach((subset, i) => {
    const path = `subsets[${i}]`;
    checkEndpointAddresses(recordsField(subset, 'addresses', path, p), `${path}.addresses`, p);
    checkEndpointAddresses(
      recordsField(subset, 'notReadyAddresses', path, p),
      `${path}.notReadyAddresses`,
      p,
    );
    const ports = recordsField(subset, 'ports', path, p);
    if (ports) checkEndpointPorts(ports, `${path}.ports`, p);
  });
});

/** Checks one address of a slice against its `addressType`. */
function checkSliceAddress(value: unknown, addressType: unknown, path: string, p: Problems): void {
  if (addressType === 'IPv4' || addressType === 'IPv6') {
    checkEndpointIP(value, addressType === 'IPv4' ? 4 : 6, path, p);
  } else if (
    addressType === 'FQDN' &&
    (typeof value !== 'string' || value.length > 253 || !DNS1123_SUBDOMAIN.test(value))
  ) {
    p.add(path, `must be a DNS-1123 name of at most 253 characters, got ${describe(value)}`);
  }
}

/**
 * Checks an EndpointSlice as the API server does: metadata with a non-empty
 * `kubernetes.io/service-name` label (a slice without one belongs to no Service), `addressType`
 * IPv4/IPv6/FQDN, `endpoints` (absent means `[]`, at most 1000) objects each with 1..100 `addresses`
 * of that type (IPs neither unspecified, multicast nor broadcast; FQDNs DNS-1123 names),
 * `conditions` booleans and bounded `hostname` / `nodeName` / `zone`; `ports` (at most 20 000) with
 * `port` an integer 1..65535 (a slice port without one cannot be served), `protocol` TCP/UDP/SCTP
 * when given, `name` a DNS-1123 label, required and unique when there are several.
 */
export const validateEndpointSlice = validator<EndpointSlice>('EndpointSlice', (copy, meta, p) => {
  if (meta) {
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
  if (endpoints) checkCount(endpoints, 'endpoints', MAX_SLICE_ENDPOINTS, p);
  endpoints?.forEach((endpoint, i) => {
    const path = `endpoints[${i}]`;
    const addresses = copyArray(endpoint.addresses, `${path}.addresses`, p);
    if (addresses) {
      endpoint.addresses = addresses;
      if (addresses.length === 0) p.add(`${path}.addresses`, 'must hold at least one address');
      checkCount(addresses, `${path}.addresses`, MAX_ENDPOINT_ADDRESSES, p);
      addresses.slice(0, MAX_ENDPOINT_ADDRESSES).forEach((address, j) => {
        checkSliceAddress(address, copy.addressType, `${path}.addresses[${j}]`, p);
      });
    }
    const conditions = recordField(endpoint, 'conditions', path, p);
    if (conditions) {
      for (const field of ['ready', 'serving', 'terminating'])
        checkBoolean(conditions, field, `${path}.conditions`, p);
    }
    checkString(endpoint, 'hostname', path, p, 63);
    checkString(endpoint, 'nodeName', path, p);
    checkString(endpoint, 'zone', path, p, 63);
  });
  const ports = recordsField(copy, 'ports', '', p);
  if (ports) {
    checkCount(ports, 'ports', MAX_SLICE_PORTS, p);
    checkEndpointPorts(ports, 'ports', p);
  }
});
