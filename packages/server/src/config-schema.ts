import { z } from 'zod';
import { DurationParseError, parseDuration } from './duration.js';
import { appendPortIfNeeded, isIPAddress } from './host-port.js';

/**
 * The KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) the daemon reads: kube-proxy's own
 * fields, so an existing kube-proxy config file works, plus one extension block, `userspaceProxy`,
 * for what only a userspace proxy has (a manifest source, drain timeout, per-port limits). Inside the
 * daemon every duration is milliseconds; in files and flags it is a Go duration string.
 * It is longer than 400 lines because the type, its zod schema, the defaults and the resolution are
 * one table of fields read side by side: split, a new field would be four files to keep in step.
 */

export const CONFIG_API_VERSION = 'kubeproxy.config.k8s.io/v1alpha1';
export const CONFIG_KIND = 'KubeProxyConfiguration';

/** kube-proxy's ProxyHealthzPort. */
export const DEFAULT_HEALTHZ_PORT = 10_256;
/** kube-proxy's ProxyStatusPort. */
export const DEFAULT_METRICS_PORT = 10_249;

/** The `mode` values; "" means the default, service-port-portal, which needs no NAT and no root. */
export const PROXY_MODES = ['service-port-portal', 'userspace'] as const;
/** What an empty `mode` selects. */
export const DEFAULT_PROXY_MODE = 'service-port-portal';

/** How the API server is reached (`--kubeconfig`); only `kubeconfig` matters to this daemon. */
export interface ClientConnectionConfiguration {
  kubeconfig: string;
  acceptContentTypes: string;
  contentType: string;
  qps: number;
  burst: number;
}

/** component-base logging options; `format` and `verbosity` are used. */
export interface LoggingConfiguration {
  /** "text" (human-readable) or "json". */
  format: string;
  /** klog-style verbosity: 0 info, 1–2 debug, 3–4 trace, 5+ everything. */
  verbosity: number;
  flushFrequency?: string | number | undefined;
  vmodule?: unknown[] | null | undefined;
  options?: Record<string, unknown> | undefined;
}

/** The iptables section: in a userspace proxy only the sync periods matter (kube-proxy 1.25 did the same). */
export interface IPTablesConfiguration {
  masqueradeBit: number;
  masqueradeAll: boolean;
  localhostNodePorts: boolean;
  syncPeriod: number;
  minSyncPeriod: number;
}

/** Conntrack sysctl tuning: validated as kube-proxy does, then ignored (we own no conntrack sysctls). */
export interface ConntrackConfiguration {
  maxPerCore: number | null;
  min: number | null;
  tcpEstablishedTimeout: number | null;
  tcpCloseWaitTimeout: number | null;
  tcpBeLiberal: boolean;
  udpTimeout: number;
  udpStreamTimeout: number;
}

/**
 * The caps of each list a cluster source pages through (`userspaceProxy.listLimits`), so that an API
 * server (or something posing as one) cannot page forever or fill the heap; past one, the list fails,
 * is logged and counted, and the informer retries with back-off. The defaults are
 * `@userspace-proxy/kubernetes`'s `DEFAULT_LIST_LIMITS` (far above 10 000 Services); a bigger cluster
 * raises them here. Unused with a manifest.
 */
export interface ListLimitsConfiguration {
  /** Objects asked for per page; 0 lists in one request. */
  pageSize: number;
  /** Pages one list may take. */
  maxPages: number;
  /** Objects one list may hold. */
  maxItems: number;
  /** Bytes of one page's response. */
  maxPageBytes: number;
  /** Bytes of one list's responses, all pages together. */
  maxListBytes: number;
  /** How long one page request may stay silent (no byte received). */
  requestTimeout: number;
  /** How long one page request may take in all, however steadily its bytes trickle in. */
  requestDeadline: number;
}

/** The extension block: everything here is ours, not kube-proxy's. Each limit has a default. */
export interface UserspaceProxyConfiguration {
  /** A manifest of Services and EndpointSlices/Endpoints to serve; "" when a cluster is the source. */
  servicesFile: string;
  /** After SIGTERM, how long established connections may go on before the process exits. */
  drainTimeout: number;
  /** TCP connections one Service port portal proxies at once; 0 = no limit. */
  maxConnectionsPerPort: number;
  /** UDP client sessions one Service port portal keeps at once. */
  maxUdpSessionsPerPort: number;
  /** Close a TCP connection idle both ways this long; 0 = never. */
  tcpIdleTimeout: number;
  /** After one side of a TCP connection half-closes, how long the other may go on. */
  tcpHalfCloseTimeout: number;
  /** TCP keep-alive initial delay on both legs; 0 disables keep-alive. */
  tcpKeepAlive: number;
  /** One dial attempt per entry, each with this timeout, moving to the next endpoint on failure. */
  dialTimeouts: number[];
  /** UDP socket receive/send buffer size; 0 = 4 MiB asked for the Service socket, the OS default for sessions. */
  udpBufferBytes: number;
  /**
   * Cluster source with `nodePortAddresses: [primary]`: how long the start waits for this node's Node
   * object, whose IPs "primary" means, before it serves node ports on the detected addresses; 0 = no wait.
   */
  nodeWaitTimeout: number;
  /**
   * Idling (OpenShift's unidling proxier): Services marked `idling.alpha.openshift.io/idled-at`
   * with no endpoints keep answering, their clients are held and the pods asked for. Off by default.
   */
  idling: boolean;
  /** TCP clients one idled Service port holds at once; the oldest is closed past it. */
  idlingMaxHeldPerPort: number;
  /** How long a held client waits for pods before it is closed. */
  idlingHoldTimeout: number;
  /** SCTP: the UDP port of RFC 6951 encapsulation, on every Service address (9899, the IANA port). */
  sctpEncapsulationPort: number;
  /** SCTP: client associations one Service port address relays at once. */
  sctpMaxAssociationsPerPort: number;
  /**
   * SCTP: client associations one peer address may hold on one Service port address; 0 (the
   * default) sets no cap of its own, since clients behind one NAT share an address.
   */
  sctpMaxAssociationsPerAddress: number;
  /**
   * SCTP: the path MTU the engine builds packets for, IP bytes (packets are this less the IP and
   * UDP headers). 1500 by default; an overlay network (VXLAN: 1450) or jumbo frames want theirs,
   * or packets are fragmented by IP or dropped on the way.
   */
  sctpMtu: number;
  /**
   * TCP data path: `node` (core's sockets, the default) or `native` (`@userspace-proxy/native`: a C
   * helper process relays with splice(2) on every core, Node still picks the endpoints). Opt-in:
   * needs a C compiler on first use; Services with the PROXY protocol annotation keep the Node
   * socket. docs/native.md.
   */
  dataPath: 'node' | 'native';
  /**
   * SCTP: `udp` (RFC 6951 encapsulation, the default), `udp-helper` (the same, its datagrams moved
   * in batches by a C helper that also does the CRC32c; opt-in) or `raw` (native IPv4 SCTP, root;
   * opt-in).
   */
  sctpTransport: 'udp' | 'udp-helper' | 'raw';
  /** Data-path processes: a count, or "auto" (the cores, capped; workers/worker-count.ts). 1 = one process. */
  workers: number | 'auto';
  /** The caps of a cluster source's lists. */
  listLimits: ListLimitsConfiguration;
}

/** The complete, defaulted configuration. */
export interface KubeProxyConfiguration {
  apiVersion: string;
  kind: string;
  featureGates: Record<string, boolean>;
  clientConnection: ClientConnectionConfiguration;
  logging: LoggingConfiguration;
  hostnameOverride: string;
  bindAddress: string;
  healthzBindAddress: string;
  metricsBindAddress: string;
  bindAddressHardFail: boolean;
  enableProfiling: boolean;
  showHiddenMetricsForVersion: string;
  mode: string;
  iptables: IPTablesConfiguration;
  conntrack: ConntrackConfiguration;
  /** Accepted so that kube-proxy files load; unused by a userspace proxy. */
  ipvs: Record<string, unknown>;
  nftables: Record<string, unknown>;
  winkernel: Record<string, unknown>;
  detectLocalMode: string;
  detectLocal: { bridgeInterface: string; interfaceNamePrefix: string };
  clusterCIDR: string;
  nodePortAddresses: string[];
  oomScoreAdj: number;
  configSyncPeriod: number;
  portRange: string;
  udpIdleTimeout: number;
  windowsRunAsService: boolean;
  userspaceProxy: UserspaceProxyConfiguration;
}

const duration = z.string().transform((text, ctx) => {
  try {
    return parseDuration(text);
  } catch (err) {
    ctx.addIssue({
      code: 'custom',
      message: err instanceof DurationParseError ? err.message : String(err),
    });
    return z.NEVER;
  }
});
const int32 = z.number().int().min(-2_147_483_648).max(2_147_483_647);
const opaque = z.record(z.string(), z.unknown());

/**
 * The shape of a configuration file: every field optional, unknown keys reported (config-load turns
 * them into warnings, as kube-proxy's lenient decoding does), wrong types reported as decode errors.
 */
export const configFileSchema = z.strictObject({
  apiVersion: z.string().optional(),
  kind: z.string().optional(),
  featureGates: z.record(z.string(), z.boolean()).nullable().optional(),
  clientConnection: z
    .strictObject({
      kubeconfig: z.string().optional(),
      acceptContentTypes: z.string().optional(),
      contentType: z.string().optional(),
      qps: z.number().optional(),
      burst: int32.optional(),
    })
    .optional(),
  logging: z
    .strictObject({
      format: z.string().optional(),
      verbosity: z.number().int().min(0).optional(),
      flushFrequency: z.union([z.string(), z.number()]).optional(),
      vmodule: z.array(z.unknown()).nullable().optional(),
      options: opaque.optional(),
    })
    .optional(),
  hostnameOverride: z.string().optional(),
  bindAddress: z.string().optional(),
  healthzBindAddress: z.string().optional(),
  metricsBindAddress: z.string().optional(),
  bindAddressHardFail: z.boolean().optional(),
  enableProfiling: z.boolean().optional(),
  showHiddenMetricsForVersion: z.string().optional(),
  mode: z.string().optional(),
  iptables: z
    .strictObject({
      masqueradeBit: int32.nullable().optional(),
      masqueradeAll: z.boolean().optional(),
      localhostNodePorts: z.boolean().nullable().optional(),
      syncPeriod: duration.optional(),
      minSyncPeriod: duration.optional(),
    })
    .optional(),
  conntrack: z
    .strictObject({
      maxPerCore: int32.nullable().optional(),
      min: int32.nullable().optional(),
      tcpEstablishedTimeout: duration.nullable().optional(),
      tcpCloseWaitTimeout: duration.nullable().optional(),
      tcpBeLiberal: z.boolean().optional(),
      udpTimeout: duration.optional(),
      udpStreamTimeout: duration.optional(),
    })
    .optional(),
  ipvs: opaque.optional(),
  nftables: opaque.optional(),
  winkernel: opaque.optional(),
  detectLocalMode: z.string().optional(),
  detectLocal: z
    .strictObject({
      bridgeInterface: z.string().optional(),
      interfaceNamePrefix: z.string().optional(),
    })
    .optional(),
  clusterCIDR: z.string().optional(),
  nodePortAddresses: z.array(z.string()).nullable().optional(),
  oomScoreAdj: int32.nullable().optional(),
  configSyncPeriod: duration.optional(),
  portRange: z.string().optional(),
  udpIdleTimeout: duration.optional(),
  windowsRunAsService: z.boolean().optional(),
  userspaceProxy: z
    .strictObject({
      servicesFile: z.string().optional(),
      drainTimeout: duration.optional(),
      maxConnectionsPerPort: z.number().int().optional(),
      maxUdpSessionsPerPort: z.number().int().optional(),
      tcpIdleTimeout: duration.optional(),
      tcpHalfCloseTimeout: duration.optional(),
      tcpKeepAlive: duration.optional(),
      dialTimeouts: z.array(duration).optional(),
      udpBufferBytes: z.number().int().optional(),
      nodeWaitTimeout: duration.optional(),
      idling: z.boolean().optional(),
      idlingMaxHeldPerPort: z.number().int().optional(),
      idlingHoldTimeout: duration.optional(),
      sctpEncapsulationPort: z.number().int().optional(),
      sctpMaxAssociationsPerPort: z.number().int().optional(),
      sctpMaxAssociationsPerAddress: z.number().int().optional(),
      sctpMtu: z.number().int().optional(),
      sctpTransport: z.enum(['udp', 'udp-helper', 'raw']).optional(),
      dataPath: z.enum(['node', 'native']).optional(),
      workers: z.union([z.number().int(), z.literal('auto')]).optional(),
      listLimits: z
        .strictObject({
          pageSize: z.number().int().optional(),
          maxPages: z.number().int().optional(),
          maxItems: z.number().int().optional(),
          maxPageBytes: z.number().int().optional(),
          maxListBytes: z.number().int().optional(),
          requestTimeout: duration.optional(),
          requestDeadline: duration.optional(),
        })
        .optional(),
    })
    .optional(),
});

/** A decoded file, or the values set by flags: anything may be missing. */
export type ConfigInput = z.output<typeof configFileSchema>;

/**
 * `@userspace-proxy/kubernetes`'s `DEFAULT_LIST_LIMITS`, repeated because the daemon loads that
 * package only for a cluster source (a test holds the two equal).
 */
export const DEFAULT_LIST_LIMITS_CONFIG: Readonly<ListLimitsConfiguration> = Object.freeze({
  pageSize: 500,
  maxPages: 10_000,
  maxItems: 1_000_000,
  maxPageBytes: 256 * 1024 * 1024,
  maxListBytes: 1024 * 1024 * 1024,
  requestTimeout: 60_000,
  requestDeadline: 120_000,
});

/** The daemon's defaults for the extension block (docs/operations.md says why each). */
export const DEFAULT_USERSPACE_PROXY: Readonly<UserspaceProxyConfiguration> = Object.freeze({
  servicesFile: '',
  drainTimeout: 25_000,
  maxConnectionsPerPort: 0,
  maxUdpSessionsPerPort: 4096,
  tcpIdleTimeout: 0,
  tcpHalfCloseTimeout: 60_000,
  tcpKeepAlive: 15_000,
  dialTimeouts: [250, 500, 1000, 2000],
  udpBufferBytes: 0,
  nodeWaitTimeout: 30_000,
  idling: false,
  idlingMaxHeldPerPort: 16,
  idlingHoldTimeout: 120_000,
  sctpEncapsulationPort: 9899,
  sctpMaxAssociationsPerPort: 1024,
  sctpMaxAssociationsPerAddress: 0,
  sctpMtu: 1500,
  sctpTransport: 'udp',
  dataPath: 'node',
  workers: 1,
  listLimits: DEFAULT_LIST_LIMITS_CONFIG,
});

/** `a` with every key `b` defines (deeply, for plain objects) replaced by `b`'s value. */
export function mergeInput(a: ConfigInput, b: ConfigInput): ConfigInput {
  const out: Record<string, unknown> = { ...a };
  for (const [key, value] of Object.entries(b)) {
    if (value === undefined) continue;
    const prev = out[key];
    const isPlain = (v: unknown): v is Record<string, unknown> =>
      typeof v === 'object' && v !== null && !Array.isArray(v);
    out[key] = isPlain(prev) && isPlain(value) ? { ...prev, ...value } : value;
  }
  return out as ConfigInput;
}

/**
 * Applies kube-proxy's v1alpha1 defaulting to a decoded file: absent fields get their defaults, and
 * so do the zero values kube-proxy re-defaults (an empty address, a "0s" sync period, UDP timeout or
 * config sync period, a 0 qps or burst); a bare IP in `healthzBindAddress` / `metricsBindAddress`
 * gets the default port, and the loopback/wildcard default follows the family of `bindAddress`.
 * Flags are applied after this, so `--min-sync-period 0` does mean 0.
 */
export function defaultConfiguration(input: ConfigInput = {}): KubeProxyConfiguration {
  const bindAddress = input.bindAddress || '0.0.0.0';
  const v6 = isIPAddress(bindAddress) && bindAddress.includes(':');
  const healthz = input.healthzBindAddress || `${v6 ? '[::]' : '0.0.0.0'}:${DEFAULT_HEALTHZ_PORT}`;
  const metrics =
    input.metricsBindAddress || `${v6 ? '[::1]' : '127.0.0.1'}:${DEFAULT_METRICS_PORT}`;
  const ext = input.userspaceProxy ?? {};
  return {
    apiVersion: input.apiVersion ?? CONFIG_API_VERSION,
    kind: input.kind ?? CONFIG_KIND,
    featureGates: { ...(input.featureGates ?? {}) },
    clientConnection: {
      kubeconfig: input.clientConnection?.kubeconfig ?? '',
      acceptContentTypes: input.clientConnection?.acceptContentTypes ?? '',
      contentType: input.clientConnection?.contentType || 'application/vnd.kubernetes.protobuf',
      qps: input.clientConnection?.qps || 5,
      burst: input.clientConnection?.burst || 10,
    },
    logging: {
      ...input.logging,
      format: input.logging?.format || 'text',
      verbosity: input.logging?.verbosity ?? 0,
    },
    hostnameOverride: input.hostnameOverride ?? '',
    bindAddress,
    healthzBindAddress: appendPortIfNeeded(healthz, DEFAULT_HEALTHZ_PORT),
    metricsBindAddress: appendPortIfNeeded(metrics, DEFAULT_METRICS_PORT),
    bindAddressHardFail: input.bindAddressHardFail ?? false,
    enableProfiling: input.enableProfiling ?? false,
    showHiddenMetricsForVersion: input.showHiddenMetricsForVersion ?? '',
    mode: input.mode ?? '',
    iptables: {
      masqueradeBit: input.iptables?.masqueradeBit ?? 14,
      masqueradeAll: input.iptables?.masqueradeAll ?? false,
      localhostNodePorts: input.iptables?.localhostNodePorts ?? true,
      syncPeriod: input.iptables?.syncPeriod || 30_000,
      minSyncPeriod: input.iptables?.minSyncPeriod || 1000,
    },
    conntrack: {
      maxPerCore: input.conntrack?.maxPerCore ?? 32_768,
      min: input.conntrack?.min ?? 131_072,
      tcpEstablishedTimeout: input.conntrack?.tcpEstablishedTimeout ?? 86_400_000,
      tcpCloseWaitTimeout: input.conntrack?.tcpCloseWaitTimeout ?? 3_600_000,
      tcpBeLiberal: input.conntrack?.tcpBeLiberal ?? false,
      udpTimeout: input.conntrack?.udpTimeout ?? 0,
      udpStreamTimeout: input.conntrack?.udpStreamTimeout ?? 0,
    },
    ipvs: { ...(input.ipvs ?? {}) },
    nftables: { ...(input.nftables ?? {}) },
    winkernel: { ...(input.winkernel ?? {}) },
    detectLocalMode: input.detectLocalMode ?? '',
    detectLocal: {
      bridgeInterface: input.detectLocal?.bridgeInterface ?? '',
      interfaceNamePrefix: input.detectLocal?.interfaceNamePrefix ?? '',
    },
    clusterCIDR: input.clusterCIDR ?? '',
    nodePortAddresses: [...(input.nodePortAddresses ?? [])],
    oomScoreAdj: input.oomScoreAdj ?? -999,
    configSyncPeriod: input.configSyncPeriod || 900_000,
    portRange: input.portRange ?? '',
    udpIdleTimeout: input.udpIdleTimeout || 10_000,
    windowsRunAsService: input.windowsRunAsService ?? false,
    userspaceProxy: {
      servicesFile: ext.servicesFile ?? DEFAULT_USERSPACE_PROXY.servicesFile,
      drainTimeout: ext.drainTimeout ?? DEFAULT_USERSPACE_PROXY.drainTimeout,
      maxConnectionsPerPort:
        ext.maxConnectionsPerPort ?? DEFAULT_USERSPACE_PROXY.maxConnectionsPerPort,
      maxUdpSessionsPerPort:
        ext.maxUdpSessionsPerPort ?? DEFAULT_USERSPACE_PROXY.maxUdpSessionsPerPort,
      tcpIdleTimeout: ext.tcpIdleTimeout ?? DEFAULT_USERSPACE_PROXY.tcpIdleTimeout,
      tcpHalfCloseTimeout: ext.tcpHalfCloseTimeout ?? DEFAULT_USERSPACE_PROXY.tcpHalfCloseTimeout,
      tcpKeepAlive: ext.tcpKeepAlive ?? DEFAULT_USERSPACE_PROXY.tcpKeepAlive,
      dialTimeouts: [...(ext.dialTimeouts ?? DEFAULT_USERSPACE_PROXY.dialTimeouts)],
      udpBufferBytes: ext.udpBufferBytes ?? DEFAULT_USERSPACE_PROXY.udpBufferBytes,
      nodeWaitTimeout: ext.nodeWaitTimeout ?? DEFAULT_USERSPACE_PROXY.nodeWaitTimeout,
      idling: ext.idling ?? DEFAULT_USERSPACE_PROXY.idling,
      idlingMaxHeldPerPort:
        ext.idlingMaxHeldPerPort ?? DEFAULT_USERSPACE_PROXY.idlingMaxHeldPerPort,
      idlingHoldTimeout: ext.idlingHoldTimeout ?? DEFAULT_USERSPACE_PROXY.idlingHoldTimeout,
      sctpEncapsulationPort:
        ext.sctpEncapsulationPort ?? DEFAULT_USERSPACE_PROXY.sctpEncapsulationPort,
      sctpMaxAssociationsPerPort:
        ext.sctpMaxAssociationsPerPort ?? DEFAULT_USERSPACE_PROXY.sctpMaxAssociationsPerPort,
      sctpMaxAssociationsPerAddress:
        ext.sctpMaxAssociationsPerAddress ?? DEFAULT_USERSPACE_PROXY.sctpMaxAssociationsPerAddress,
      sctpMtu: ext.sctpMtu ?? DEFAULT_USERSPACE_PROXY.sctpMtu,
      sctpTransport: ext.sctpTransport ?? DEFAULT_USERSPACE_PROXY.sctpTransport,
      dataPath: ext.dataPath ?? DEFAULT_USERSPACE_PROXY.dataPath,
      workers: ext.workers ?? DEFAULT_USERSPACE_PROXY.workers,
      listLimits: defaultListLimits(ext.listLimits),
    },
  };
}

/** Each list cap the file sets, the default for each it does not. */
function defaultListLimits(
  input: { readonly [K in keyof ListLimitsConfiguration]?: number | undefined } = {},
): ListLimitsConfiguration {
  const entries = Object.entries(DEFAULT_LIST_LIMITS_CONFIG) as [
    keyof ListLimitsConfiguration,
    number,
  ][];
  return Object.fromEntries(
    entries.map(([key, fallback]) => [key, input[key] ?? fallback]),
  ) as unknown as ListLimitsConfiguration;
}

/** The proxy mode a configuration selects, with "" resolved to the default. */
export function effectiveProxyMode(config: KubeProxyConfiguration): string {
  return config.mode === '' ? DEFAULT_PROXY_MODE : config.mode;
}
