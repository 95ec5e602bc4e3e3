import { parsePortRange } from '@userspace-proxy/core';
import {
  type ConntrackConfiguration,
  type IPTablesConfiguration,
  type KubeProxyConfiguration,
  PROXY_MODES,
  type UserspaceProxyConfiguration,
} from './config-schema.js';
import {
  dur,
  type FieldError,
  forbidden,
  invalid,
  num,
  type RenderedValue,
  required,
  str,
  unsupported,
} from './field-error.js';
import { cidrFamily, goSplitHostPort, isIPAddress } from './host-port.js';
import { VERSION } from './version.js';
import { MAX_WORKERS } from './workers/worker-count.js';

/**
 * Validation of a defaulted KubeProxyConfiguration. Paths and messages are kube-proxy's (the 1.25
 * rules, when the userspace mode existed, plus the `detectLocalMode` and `nodePortAddresses` keyword
 * rules of later releases) wherever kube-proxy has a rule, so an operator's search for a message finds
 * the upstream explanation; the extension block gets messages in the same form. Every error is
 * returned, in kube-proxy's order, so one run shows everything to fix.
 */

const ROOT = 'KubeProxyConfiguration';
const NODE_PORT_KEYWORDS: ReadonlySet<string> = new Set(['primary', 'localhost', 'all']);
const DETECT_LOCAL_MODES = [
  'ClusterCIDR',
  'NodeCIDR',
  'BridgeInterface',
  'InterfaceNamePrefix',
  '',
];
const LOG_FORMATS: ReadonlySet<string> = new Set(['text', 'json']);
const MAX_INT32 = 2_147_483_647;

/** Every error in `config`; empty when it is valid. */
export function validateConfiguration(config: KubeProxyConfiguration): FieldError[] {
  const errs: FieldError[] = [];
  errs.push(...validateIPTables(config.iptables, `${ROOT}.KubeProxyIPTablesConfiguration`));
  errs.push(...validateConntrack(config.conntrack, `${ROOT}.KubeProxyConntrackConfiguration`));
  if (config.mode !== '' && !(PROXY_MODES as readonly string[]).includes(config.mode)) {
    const modes = [...PROXY_MODES].sort().join(',');
    errs.push(
      invalid(
        `${ROOT}.Mode.ProxyMode`,
        str(config.mode),
        `must be ${modes} or blank (blank means the best-available proxy [currently service-port-portal])`,
      ),
    );
  }
  if (config.clientConnection.burst < 0) {
    errs.push(
      invalid(
        `${ROOT}.ClientConnection.Burst`,
        num(config.clientConnection.burst),
        'must be greater than or equal to 0',
      ),
    );
  }
  if (config.oomScoreAdj < -1000 || config.oomScoreAdj > 1000) {
    errs.push(
      invalid(
        `${ROOT}.OOMScoreAdj`,
        num(config.oomScoreAdj),
        'must be within the range [-1000, 1000]',
      ),
    );
  }
  if (config.udpIdleTimeout <= 0) {
    errs.push(
      invalid(`${ROOT}.UDPIdleTimeout`, dur(config.udpIdleTimeout), 'must be greater than 0'),
    );
  }
  if (config.configSyncPeriod <= 0) {
    errs.push(
      invalid(`${ROOT}.ConfigSyncPeriod`, dur(config.configSyncPeriod), 'must be greater than 0'),
    );
  }
  if (!isIPAddress(config.bindAddress)) {
    errs.push(
      invalid(
        `${ROOT}.BindAddress`,
        str(config.bindAddress),
        'not a valid textual representation of an IP address',
      ),
    );
  }
  if (config.healthzBindAddress !== '') {
    errs.push(...validateHostPort(config.healthzBindAddress, `${ROOT}.HealthzBindAddress`));
  }
  errs.push(...validateHostPort(config.metricsBindAddress, `${ROOT}.MetricsBindAddress`));
  if (config.clusterCIDR !== '') errs.push(...validateClusterCIDR(config.clusterCIDR));
  try {
    parsePortRange(config.portRange);
  } catch {
    errs.push(
      invalid(
        `${ROOT}.PortRange`,
        str(config.portRange),
        'must be a valid port range (e.g. 300-2000)',
      ),
    );
  }
  config.nodePortAddresses.forEach((entry, i) => {
    if (!NODE_PORT_KEYWORDS.has(entry) && cidrFamily(entry) === undefined) {
      errs.push(invalid(`${ROOT}.NodePortAddresses[${i}]`, str(entry), 'must be a valid CIDR'));
    }
  });
  const hidden = config.showHiddenMetricsForVersion;
  const [major, minor] = VERSION.split('.').map(Number);
  const previous = `${major}.${(minor ?? 0) - 1}`;
  if (hidden !== '' && hidden !== previous) {
    errs.push(
      invalid(
        `${ROOT}.ShowHiddenMetricsForVersion`,
        str(hidden),
        `--show-hidden-metrics-for-version must be omitted or have the value '${previous}'. Only the previous minor version is allowed`,
      ),
    );
  }
  if (!DETECT_LOCAL_MODES.includes(config.detectLocalMode)) {
    errs.push(unsupported(`${ROOT}.DetectLocalMode`, config.detectLocalMode, DETECT_LOCAL_MODES));
  }
  const detect = `${ROOT}.DetectLocalConfiguration`;
  if (config.detectLocalMode === 'BridgeInterface' && config.detectLocal.bridgeInterface === '') {
    errs.push(invalid(`${detect}.InterfaceName`, str(''), 'must not be empty'));
  }
  if (
    config.detectLocalMode === 'InterfaceNamePrefix' &&
    config.detectLocal.interfaceNamePrefix === ''
  ) {
    errs.push(invalid(`${detect}.InterfacePrefix`, str(''), 'must not be empty'));
  }
  errs.push(...validateLogging(config));
  errs.push(...validateUserspaceProxy(config.userspaceProxy, `${ROOT}.UserspaceProxy`));
  return errs;
}

function validateIPTables(c: IPTablesConfiguration, path: string): FieldError[] {
  const errs: FieldError[] = [];
  if (c.masqueradeBit < 0 || c.masqueradeBit > 31) {
    errs.push(
      invalid(`${path}.MasqueradeBit`, num(c.masqueradeBit), 'must be within the range [0, 31]'),
    );
  }
  if (c.syncPeriod <= 0) {
    errs.push(invalid(`${path}.SyncPeriod`, dur(c.syncPeriod), 'must be greater than 0'));
  }
  if (c.minSyncPeriod < 0) {
    errs.push(
      invalid(`${path}.MinSyncPeriod`, dur(c.minSyncPeriod), 'must be greater than or equal to 0'),
    );
  }
  if (c.minSyncPeriod > c.syncPeriod) {
    errs.push(
      invalid(
        `${path}.SyncPeriod`,
        dur(c.minSyncPeriod),
        `must be greater than or equal to ${path}.MinSyncPeriod`,
      ),
    );
  }
  return errs;
}

function validateConntrack(c: ConntrackConfiguration, path: string): FieldError[] {
  const errs: FieldError[] = [];
  const nonNegative = (
    field: string,
    value: number | null,
    render: (value: number) => RenderedValue,
  ) => {
    if (value !== null && value < 0) {
      errs.push(invalid(`${path}.${field}`, render(value), 'must be greater than or equal to 0'));
    }
  };
  nonNegative('MaxPerCore', c.maxPerCore, num);
  nonNegative('Min', c.min, num);
  nonNegative('TCPEstablishedTimeout', c.tcpEstablishedTimeout, dur);
  nonNegative('TCPCloseWaitTimeout', c.tcpCloseWaitTimeout, dur);
  nonNegative('UDPTimeout', c.udpTimeout, dur);
  nonNegative('UDPStreamTimeout', c.udpStreamTimeout, dur);
  return errs;
}

/** kube-proxy's validateHostPort: "must be IP:port", then the host and the port separately. */
export function validateHostPort(input: string, path: string): FieldError[] {
  const parts = goSplitHostPort(input);
  if (parts === undefined) return [invalid(path, str(input), 'must be IP:port')];
  const errs: FieldError[] = [];
  if (!isIPAddress(parts.host)) errs.push(invalid(path, str(parts.host), 'must be a valid IP'));
  const port = /^[+-]?\d+$/.test(parts.port) ? Number(parts.port) : Number.NaN;
  if (!(port >= 1 && port <= 65_535))
    errs.push(invalid(path, str(parts.port), 'must be a valid port'));
  return errs;
}

function validateClusterCIDR(value: string): FieldError[] {
  const path = `${ROOT}.ClusterCIDR`;
  const cidrs = value.split(',');
  if (cidrs.length > 2) {
    return [
      invalid(
        path,
        str(value),
        'only one CIDR allowed or a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)',
      ),
    ];
  }
  if (cidrs.length === 2) {
    const families = new Set(cidrs.map(cidrFamily));
    if (families.has(undefined) || families.size !== 2) {
      return [
        invalid(
          path,
          str(value),
          'must be a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)',
        ),
      ];
    }
    return [];
  }
  if (cidrFamily(value) === undefined) {
    return [
      invalid(
        path,
        str(value),
        'must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)',
      ),
    ];
  }
  return [];
}

function validateLogging(config: KubeProxyConfiguration): FieldError[] {
  const path = `${ROOT}.logging`;
  const errs: FieldError[] = [];
  const { format, verbosity, vmodule } = config.logging;
  if (!LOG_FORMATS.has(format))
    errs.push(invalid(`${path}.format`, str(format), 'Unsupported log format'));
  if (verbosity > MAX_INT32) {
    errs.push(invalid(`${path}.verbosity`, num(verbosity), `Must be <= ${MAX_INT32}`));
  }
  if (format !== 'text' && (vmodule?.length ?? 0) > 0) {
    errs.push(forbidden(`${path}.vmodule`, 'Only supported for text log format'));
  }
  return errs;
}

function validateUserspaceProxy(c: UserspaceProxyConfiguration, path: string): FieldError[] {
  const errs: FieldError[] = [];
  const atLeast = (
    field: string,
    value: number,
    min: 0 | 1,
    render: (value: number) => RenderedValue,
  ) => {
    if (value < min) {
      const detail = min === 0 ? 'must be greater than or equal to 0' : 'must be greater than 0';
      errs.push(invalid(`${path}.${field}`, render(value), detail));
    }
  };
  atLeast('DrainTimeout', c.drainTimeout, 0, dur);
  atLeast('MaxConnectionsPerPort', c.maxConnectionsPerPort, 0, num);
  atLeast('MaxUDPSessionsPerPort', c.maxUdpSessionsPerPort, 1, num);
  atLeast('TCPIdleTimeout', c.tcpIdleTimeout, 0, dur);
  atLeast('TCPHalfCloseTimeout', c.tcpHalfCloseTimeout, 0, dur);
  atLeast('TCPKeepAlive', c.tcpKeepAlive, 0, dur);
  atLeast('UDPBufferBytes', c.udpBufferBytes, 0, num);
  atLeast('NodeWaitTimeout', c.nodeWaitTimeout, 0, dur);
  atLeast('IdlingMaxHeldPerPort', c.idlingMaxHeldPerPort, 1, num);
  atLeast('IdlingHoldTimeout', c.idlingHoldTimeout, 1, dur);
  atLeast('SCTPMaxAssociationsPerPort', c.sctpMaxAssociationsPerPort, 1, num);
  atLeast('SCTPMaxAssociationsPerAddress', c.sctpMaxAssociationsPerAddress, 0, num);
  if (c.sctpMtu < 576 || c.sctpMtu > 65_535) {
    errs.push(invalid(`${path}.SCTPMTU`, num(c.sctpMtu), 'must be within 576-65535 (IP bytes)'));
  }
  if (c.dataPath === 'native' && c.workers !== 1) {
    errs.push(
      invalid(
        `${path}.Workers`,
        c.workers === 'auto' ? str(c.workers) : num(c.workers),
        'must be 1 with DataPath "native": its helper already uses every core',
      ),
    );
  }
  if (c.workers !== 'auto' && (c.workers < 1 || c.workers > MAX_WORKERS)) {
    errs.push(invalid(`${path}.Workers`, num(c.workers), `must be "auto" or 1-${MAX_WORKERS}`));
  }
  if (c.sctpEncapsulationPort < 1 || c.sctpEncapsulationPort > 65_535) {
    errs.push(
      invalid(
        `${path}.SCTPEncapsulationPort`,
        num(c.sctpEncapsulationPort),
        'must be a valid port number (1-65535)',
      ),
    );
  }
  if (c.dialTimeouts.length === 0) {
    errs.push(required(`${path}.DialTimeouts`, 'must contain at least one timeout'));
  }
  c.dialTimeouts.forEach((timeout, i) => {
    if (timeout <= 0)
      errs.push(invalid(`${path}.DialTimeouts[${i}]`, dur(timeout), 'must be greater than 0'));
  });
  // Every list cap must let something through: 0 pages or items would refuse every list, and so
  // leave the proxy without Services for good. A page size of 0 is client-go's "all in one request".
  const list = c.listLimits;
  atLeast('ListLimits.PageSize', list.pageSize, 0, num);
  atLeast('ListLimits.MaxPages', list.maxPages, 1, num);
  atLeast('ListLimits.MaxItems', list.maxItems, 1, num);
  atLeast('ListLimits.MaxPageBytes', list.maxPageBytes, 1, num);
  atLeast('ListLimits.MaxListBytes', list.maxListBytes, 1, num);
  atLeast('ListLimits.RequestTimeout', list.requestTimeout, 1, dur);
  atLeast('ListLimits.RequestDeadline', list.requestDeadline, 1, dur);
  return errs;
}
