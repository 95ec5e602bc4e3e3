import { DEFAULT_HEALTHZ_PORT, DEFAULT_METRICS_PORT } from './config-schema.js';
import { formatDuration, parseDuration } from './duration.js';
import { goJoinHostPort, goSplitHostPort, isIPAddress } from './host-port.js';
import { MAX_AUTO_WORKERS, MAX_WORKERS } from './workers/worker-count.js';

/**
 * The daemon's flags: kube-proxy's names, help and defaults for the ones a userspace proxy uses,
 * then ours. Each value parser throws {@link FlagValueError} with pflag's wording, so cli.ts can
 * report every bad value in kube-proxy's form.
 */

/** Turns a flag's text into its configuration value, or throws FlagValueError. */
export type Parser = (raw: string) => unknown;

/** One flag. */
export interface FlagSpec {
  flags: string;
  description: string;
  /** Shown in --help; never applied here (defaults come from the configuration defaulting). */
  shownDefault?: string;
  parse?: Parser;
  /** The configuration field the flag sets, as a dotted path; absent for action flags. */
  field?: string;
  /** Repeated uses accumulate (string slices). */
  repeatable?: boolean;
  boolean?: boolean;
}

/** A flag value that does not parse; the message is pflag's reason. */
export class FlagValueError extends Error {}

const fail = (message: string): never => {
  throw new FlagValueError(message);
};

/** `--workers`: "auto" or a whole number from 1 to {@link MAX_WORKERS}. */
export const parseWorkers: Parser = (raw) => {
  if (raw === 'auto') return 'auto';
  const n = /^[0-9]+$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isInteger(n) || n < 1 || n > MAX_WORKERS) {
    return fail(`must be "auto" or a whole number from 1 to ${MAX_WORKERS}`);
  }
  return n;
};

/** Go's strconv.ParseBool, as pflag's bool flags accept. */
export const parseBool: Parser = (raw) => {
  if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(raw)) return true;
  if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(raw)) return false;
  return fail(`strconv.ParseBool: parsing ${JSON.stringify(raw)}: invalid syntax`);
};

const parseDurationFlag: Parser = (raw) => {
  try {
    return parseDuration(raw);
  } catch (err) {
    return fail((err as Error).message);
  }
};

const parseInt32: Parser = (raw) =>
  /^[+-]?\d+$/.test(raw) && Math.abs(Number(raw)) <= 2_147_483_647
    ? Number(raw)
    : fail(`strconv.ParseInt: parsing ${JSON.stringify(raw)}: invalid syntax`);

const parseIP: Parser = (raw) =>
  isIPAddress(raw) ? raw : fail(`${JSON.stringify(raw)} is not a valid IP address`);

/** kube-proxy's IPPortVar: "ip" or "ip:port"; a bare IP gets the server's default port. */
const parseIPPort =
  (defaultPort: number): Parser =>
  (raw) => {
    if (raw === '') return '';
    if (isIPAddress(raw)) return goJoinHostPort(raw, defaultPort);
    const parts = goSplitHostPort(raw);
    if (parts === undefined) {
      return fail(
        `${JSON.stringify(raw)} is not in a valid format (ip or ip:port): missing port or bad brackets`,
      );
    }
    if (!isIPAddress(parts.host))
      return fail(`${JSON.stringify(parts.host)} is not a valid IP address`);
    if (!/^\d+$/.test(parts.port))
      return fail(`${JSON.stringify(parts.port)} is not a valid number`);
    return raw;
  };

const parseLogFormat: Parser = (raw) =>
  raw === 'text' || raw === 'json'
    ? raw
    : fail(`unsupported log format ${JSON.stringify(raw)}: use text or json`);

const parseCsv: Parser = (raw) =>
  raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');

const d = formatDuration;

/** Every flag, in --help order. */
export const FLAGS: readonly FlagSpec[] = [
  {
    flags: '--config <path>',
    description:
      'The path to a KubeProxyConfiguration file (YAML or JSON). Flags that set a field of it are ignored when it is given, except --hostname-override and the logging flags.',
  },
  {
    flags: '--write-config-to <path>',
    description:
      'Write the effective configuration (defaults, file and flags combined) to this file as YAML and exit.',
  },
  {
    flags: '--cleanup [bool]',
    description:
      'Remove what the userspace (redirect) mode left behind, the KUBE-PORTALS-* and KUBE-NODEPORT-* iptables chains and their jump rules, then exit.',
    boolean: true,
  },
  {
    flags: '--exit-with-parent [bool]',
    description:
      'Stop (draining as on SIGTERM) when the process that started the daemon exits, checked every second: for scripts and wrappers that may die without passing a signal on.',
    shownDefault: 'false',
    boolean: true,
  },
  {
    flags: '--bind-address <ip>',
    description:
      'The node IP. In userspace (redirect) mode the proxy sockets listen on it (a loopback address is refused: redirected traffic never arrives there); a specific address also becomes the node IP for "--nodeport-addresses primary".',
    shownDefault: '0.0.0.0',
    parse: parseIP,
    field: 'bindAddress',
  },
  {
    flags: '--healthz-bind-address <ip:port>',
    description: 'Where the health server (/healthz, /livez) listens; a bare IP gets port 10256.',
    shownDefault: `0.0.0.0:${DEFAULT_HEALTHZ_PORT}`,
    parse: parseIPPort(DEFAULT_HEALTHZ_PORT),
    field: 'healthzBindAddress',
  },
  {
    flags: '--metrics-bind-address <ip:port>',
    description:
      'Where the metrics server (/metrics, /healthz, /proxyMode, /configz) listens; a bare IP gets port 10249. Loopback by default: the endpoints are unauthenticated.',
    shownDefault: `127.0.0.1:${DEFAULT_METRICS_PORT}`,
    parse: parseIPPort(DEFAULT_METRICS_PORT),
    field: 'metricsBindAddress',
  },
  {
    flags: '--bind-address-hard-fail [bool]',
    description:
      'Exit when the health or metrics server cannot listen, instead of retrying every 5 s.',
    shownDefault: 'false',
    boolean: true,
    field: 'bindAddressHardFail',
  },
  {
    flags: '--profiling [bool]',
    description:
      'Serve V8 CPU and heap profiles on the metrics server (/debug/pprof/profile?seconds=N, /debug/pprof/heap): samples of stack frames and sizes, never object contents.',
    shownDefault: 'false',
    boolean: true,
    field: 'enableProfiling',
  },
  {
    flags: '--proxy-mode <mode>',
    description:
      'How traffic reaches the proxy: "service-port-portal" listens on every Service address itself (no NAT, no root); "userspace" listens on one proxy port per Service port and installs iptables redirect rules (root). Blank means service-port-portal.',
    shownDefault: '""',
    field: 'mode',
  },
  {
    flags: '--proxy-port-range <range>',
    description:
      'Userspace mode: the host ports proxy sockets may use, "begin-end", "begin+offset" or "port"; blank lets the OS choose.',
    shownDefault: '""',
    field: 'portRange',
  },
  {
    flags: '--udp-timeout <duration>',
    description:
      'How long a UDP session lives with no datagram either way. kube-proxy used 250ms, too short for anything slower than DNS.',
    shownDefault: d(10_000),
    parse: parseDurationFlag,
    field: 'udpIdleTimeout',
  },
  {
    flags: '--sync-period <duration>',
    description:
      'The longest time between full syncs of the proxy to the Services; twice this is how long a queued change may wait before /healthz fails.',
    shownDefault: d(30_000),
    parse: parseDurationFlag,
    field: 'iptables.syncPeriod',
  },
  {
    flags: '--iptables-sync-period <duration>',
    description: "kube-proxy's name for --sync-period.",
    parse: parseDurationFlag,
    field: 'iptables.syncPeriod',
  },
  {
    flags: '--min-sync-period <duration>',
    description:
      'The shortest time between syncs (two may run back to back); 0 syncs on every change.',
    shownDefault: d(1000),
    parse: parseDurationFlag,
    field: 'iptables.minSyncPeriod',
  },
  {
    flags: '--iptables-min-sync-period <duration>',
    description: "kube-proxy's name for --min-sync-period.",
    parse: parseDurationFlag,
    field: 'iptables.minSyncPeriod',
  },
  {
    flags: '--config-sync-period <duration>',
    description: 'How often a cluster source re-delivers every object (informer resync).',
    shownDefault: d(900_000),
    parse: parseDurationFlag,
    field: 'configSyncPeriod',
  },
  {
    flags: '--nodeport-addresses <list>',
    description:
      'Where NodePorts are served: comma-separated CIDRs and the keywords "primary" (the node IPs), "localhost" and "all". Empty means all local addresses. Repeatable.',
    shownDefault: '[]',
    parse: parseCsv,
    field: 'nodePortAddresses',
    repeatable: true,
  },
  {
    flags: '--hostname-override <name>',
    description:
      'The node name, used on events and to find the Node; trimmed and lowercased. Always wins over the config file.',
    field: 'hostnameOverride',
  },
  {
    flags: '--kubeconfig <path>',
    description:
      'Use the Kubernetes API described by this kubeconfig file as the source of Services and EndpointSlices.',
    field: 'clientConnection.kubeconfig',
  },
  {
    flags: '--master <url>',
    description:
      "The Kubernetes API server URL; overrides the kubeconfig's. Giving it selects the cluster source.",
  },
  {
    flags: '-v, --v <level>',
    description:
      'Log verbosity: 0 info, 1-2 debug, 3-4 trace (per connection), 5 and up everything. Always wins over the config file.',
    shownDefault: '0',
    parse: (raw) => {
      const n = parseInt32(raw) as number;
      return n < 0 ? fail('must be 0 or more') : n;
    },
    field: 'logging.verbosity',
  },
  {
    flags: '--logging-format <format>',
    description:
      'Log format: "text" for people or "json" (one object per line) for collectors. Always wins over the config file.',
    shownDefault: 'text',
    parse: parseLogFormat,
    field: 'logging.format',
  },
  {
    flags: '--services-file <path>',
    description:
      'A manifest of Services with their EndpointSlices or Endpoints (YAML or JSON, several documents) to serve without a cluster. Watched: edits apply live; an invalid edit is logged and the last good state keeps serving.',
    field: 'userspaceProxy.servicesFile',
  },
  {
    flags: '--drain-timeout <duration>',
    description:
      'After SIGTERM or SIGINT, how long established connections may go on before the process exits.',
    shownDefault: d(25_000),
    parse: parseDurationFlag,
    field: 'userspaceProxy.drainTimeout',
  },
  {
    flags: '--max-connections-per-port <n>',
    description:
      'The most TCP connections one Service port address proxies at once; further clients are refused and counted. 0 means no limit.',
    shownDefault: '0',
    parse: parseInt32,
    field: 'userspaceProxy.maxConnectionsPerPort',
  },
  {
    flags: '--max-udp-sessions-per-port <n>',
    description:
      'The most UDP client sessions one Service port address keeps; datagrams from further clients are dropped and counted.',
    shownDefault: '4096',
    parse: parseInt32,
    field: 'userspaceProxy.maxUdpSessionsPerPort',
  },
  {
    flags: '--idling [bool]',
    description:
      'Idling: a Service annotated idling.alpha.openshift.io/idled-at with no endpoints keeps answering; its TCP clients are held (their first bytes kept), pods are asked for (a NeedPods Event and, on a cluster, scaling the unidle-targets back up), and the clients are handed over when endpoints come. docs/idling.md.',
    shownDefault: 'false',
    boolean: true,
    field: 'userspaceProxy.idling',
  },
  {
    flags: '--idling-max-held-per-port <n>',
    description:
      'With --idling: TCP clients one idled Service port holds; the oldest is closed past it.',
    shownDefault: '16',
    parse: parseInt32,
    field: 'userspaceProxy.idlingMaxHeldPerPort',
  },
  {
    flags: '--idling-hold-timeout <duration>',
    description: 'With --idling: how long a held client waits for pods before it is closed.',
    shownDefault: d(120_000),
    parse: parseDurationFlag,
    field: 'userspaceProxy.idlingHoldTimeout',
  },
  {
    flags: '--sctp-encapsulation-port <port>',
    description:
      'SCTP Services: the UDP port of RFC 6951 encapsulation on each Service address, shared by every SCTP Service port there (and the port endpoints are reached on). docs/sctp.md.',
    shownDefault: '9899',
    parse: parseInt32,
    field: 'userspaceProxy.sctpEncapsulationPort',
  },
  {
    flags: '--sctp-max-associations-per-port <n>',
    description:
      'SCTP Services: client associations one Service port address relays at once; further ones are aborted and counted.',
    shownDefault: '1024',
    parse: parseInt32,
    field: 'userspaceProxy.sctpMaxAssociationsPerPort',
  },
  {
    flags: '--sctp-max-associations-per-address <n>',
    description:
      'SCTP Services: client associations one peer address may hold on one Service port address (0: no cap of its own; clients behind one NAT share an address); further ones are aborted and counted.',
    shownDefault: '0',
    parse: parseInt32,
    field: 'userspaceProxy.sctpMaxAssociationsPerAddress',
  },
  {
    flags: '--sctp-mtu <bytes>',
    description:
      "SCTP Services: the path MTU packets are built for (IP bytes, 576-65535); set the network's own (an overlay such as VXLAN: 1450; jumbo frames: 9000) so packets are neither fragmented nor dropped.",
    shownDefault: '1500',
    parse: parseInt32,
    field: 'userspaceProxy.sctpMtu',
  },
  {
    flags: '--sctp-transport <udp|udp-helper|raw>',
    description:
      'SCTP Services: "udp" is RFC 6951 encapsulation; "udp-helper" the same with its datagrams moved in batches (recvmmsg/sendmmsg) and their CRC32c done by a C helper process (a C compiler on first use; opt-in, docs/sctp.md "Fourth pass" for what it saves); "raw" speaks native SCTP (IP protocol 132, IPv4) through raw sockets: root, a C compiler for its helper on first use, and no other SCTP stack on the Service addresses. docs/sctp.md.',
    shownDefault: 'udp',
    field: 'userspaceProxy.sctpTransport',
  },
  {
    flags: '--data-path <node|native>',
    description:
      'TCP and UDP data path: "node" relays in this process; "native" hands accepting and relaying to C helpers (splice(2) and recvmmsg/sendmmsg, a thread per core) while the endpoint choice stays here: a C compiler on first use, --workers 1, and Services with the PROXY protocol annotation keep the Node socket. docs/native.md.',
    shownDefault: 'node',
    field: 'userspaceProxy.dataPath',
  },
  {
    flags: '--workers <n|auto>',
    description: `Data-path processes sharing the listening sockets; "auto" is one per core, at most ${MAX_AUTO_WORKERS}. 1 serves in one process. UDP, SCTP and idled Services stay in worker 1; redirect mode always uses 1. docs/operations.md.`,
    shownDefault: '1',
    parse: parseWorkers,
    field: 'userspaceProxy.workers',
  },
  {
    flags: '--tcp-idle-timeout <duration>',
    description: 'Close a proxied TCP connection idle in both directions this long. 0 means never.',
    shownDefault: '0s',
    parse: parseDurationFlag,
    field: 'userspaceProxy.tcpIdleTimeout',
  },
];
