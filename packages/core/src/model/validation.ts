import { BlockList, isIP } from 'node:net';
import { channels } from '../diagnostics.js';
import type { InvalidObjectError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { EndpointSlice, Endpoints, Protocol, Service } from './model.js';
import { SERVICE_NAME_LABEL } from './model.js';
import {
  absent,
  at,
  checkInteger,
  checkOneOf,
  checkString,
  copyArray,
  copyRecord,
  DNS1123_LABEL,
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
 * Addresses no Service may use: the unspecified address (a listener on it takes the port on every
 * address of the host) and multicast (never a unicast destination). The API server refuses them for
 * external IPs; the proxy refuses them for every Service IP, whatever the source.
 */
const NOT_A_SERVICE_IP = new BlockList();
NOT_A_SERVICE_IP.addAddress('0.0.0.0', 'ipv4');
NOT_A_SERVICE_IP.addSubnet('224.0.0.0', 4, 'ipv4');
NOT_A_SERVICE_IP.addAddress('::', 'ipv6');
NOT_A_SERVICE_IP.addSubnet('ff00::', 8, 'ipv6');

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

/**
 * Logs a refused object (a warning naming its key and the reason) and publishes it on
 * `userspace-proxy:object:rejected`: the one way every consumer reports what it ignored, so the
 * daemon's metric counts every rejection wherever it happened.
 */
export function reportInvalidObject(log: Logger, error: InvalidObjectError): void {
  log.warn(error.message);
  if (channels.objectRejected.hasSubscribers) {
    channels.objectRejected.publish({ kind: error.kind, key: error.key, reason: error.reason });
  }
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
        if (typeof r !== 'string')
          p.add(`spec.loadBalancerSourceRanges[${i}]`, `must be a string, got ${describe(r)}`);
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
 * Checks a Service: metadata (name, namespace defaulted to "default", labels and annotations string
 * maps), `spec` (type, clusterIP "" / "None" / an IP, clusterIPs, ports: integer port 1..65535,
 * protocol TCP/UDP/SCTP defaulted to TCP, nodePort 0..65535, names DNS labels, non-empty and unique
 * when there is more than one port; externalIPs; sessionAffinity None/ClientIP; timeoutSeconds
 * 1..86400) and `status.loadBalancer.ingress[].ip`. Service IPs may be neither the unspecified
 * address nor multicast. `targetPort` is not checked: the proxy never reads it (endpoints carry the
 * port).
 */
export const validateService = validator<Service>('Service', (copy, _meta, p) => {
  checkServiceSpec(copy, p);
  checkServiceStatus(copy, p);
});

/**
 * Checks legacy Endpoints: metadata, and the shape of `subsets` (an array of objects whose
 * `addresses`, `notReadyAddresses` and `ports` are arrays of objects). Leaves are not checked: an
 * address without a usable IP or a port that is not positive is skipped per entry when endpoint lists
 * are built, so one bad address never takes the others down.
 */
export const validateEndpoints = validator<Endpoints>('Endpoints', (copy, _meta, p) => {
  const subsets = recordsField(copy, 'subsets', '', p);
  subsets?.forEach((subset, i) => {
    const path = `subsets[${i}]`;
    recordsField(subset, 'addresses', path, p);
    recordsField(subset, 'notReadyAddresses', path, p);
    recordsField(subset, 'ports', path, p);
  });
});

/**
 * Checks an EndpointSlice: metadata with a non-empty `kubernetes.io/service-name` label (a slice
 * without one belongs to no Service), `addressType` IPv4/IPv6/FQDN, `endpoints` an array of objects
 * (absent means `[]`) each with an `addresses` array and an optional `conditions` object, and `ports`
 * an array of objects. Leaves (address strings, port numbers) are skipped per entry later, as for
 * Endpoints.
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
  endpoints?.forEach((endpoint, i) => {
    const path = `endpoints[${i}]`;
    const addresses = copyArray(endpoint.addresses, `${path}.addresses`, p);
    if (addresses) endpoint.addresses = addresses;
    recordField(endpoint, 'conditions', path, p);
  });
  recordsField(copy, 'ports', '', p);
});
