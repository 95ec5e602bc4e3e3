import type { SubjectId } from './model.js';

/** The ports every backend and every subject uses; each subject has an address of its own. */
export const PORTS = {
  /** iperf3, TCP (control and bulk) and UDP. */
  iperf: 5201,
  /** The nginx HTTP backend wrk talks to. */
  http: 8080,
  /** sockperf's servers, TCP and UDP. */
  sockperf: 11111,
  /** The idle-connection holder. */
  idle: 9000,
  /** The daemon's health and metrics servers, on the daemon's address. */
  healthz: 10256,
  metrics: 10249,
} as const;

/** Proxied TCP ports (the same number on the subject and on the backend). */
export const TCP_PORTS: readonly number[] = [PORTS.iperf, PORTS.http, PORTS.sockperf, PORTS.idle];
/** Proxied UDP ports. */
export const UDP_PORTS: readonly number[] = [PORTS.iperf, PORTS.sockperf];

/** A proxy under test (every subject but direct). */
export type PeerId = Exclude<SubjectId, 'direct'>;

/** The daemon subjects: one process, two workers, and the native TCP data path. */
export type DaemonId = 'daemon' | 'daemon2' | 'native';

/** The `--workers` each daemon subject runs with (before any `--daemon-arg`). */
export const DAEMON_WORKERS: Readonly<Record<DaemonId, number>> = {
  daemon: 1,
  daemon2: 2,
  native: 1,
};

/**
 * The configuration-file lines each daemon subject adds to `userspaceProxy` (a flag such as
 * `--data-path` is ignored when `--config` is given, as kube-proxy ignores flags then; only
 * `--workers` is applied on top of the file).
 */
export const DAEMON_FILE_LINES: Readonly<Record<DaemonId, readonly string[]>> = {
  daemon: [],
  daemon2: [],
  native: ['  dataPath: native'],
};

/** Where everything listens in one run: all on loopback, a random 127.x.y.0/24 per run. */
export interface Layout {
  backend: string;
  peers: Record<PeerId, string>;
}

/**
 * A fresh 127.a.b.0/24 per run, so two runs (or a run and another helper's tests) never collide on
 * an address. `a` stays within 127.60–127.99: the project's suite uses 127.200+ and 127.201+, the
 * Kubernetes-scale benchmark 127.100+ and 127.200+, the example 127.10.
 */
export function randomLayout(rand: () => number = Math.random): Layout {
  const a = 60 + Math.floor(rand() * 40);
  const b = Math.floor(rand() * 256);
  const ip = (d: number) => `127.${a}.${b}.${d}`;
  return {
    backend: ip(2),
    peers: {
      haproxy: ip(3),
      nginx: ip(4),
      naive: ip(5),
      daemon: ip(6),
      daemon2: ip(7),
      native: ip(8),
    },
  };
}

/** Where `subject` is reached: direct is the backend itself. */
export function addressOf(layout: Layout, subject: SubjectId): string {
  return subject === 'direct' ? layout.backend : layout.peers[subject];
}

/**
 * HAProxy in `mode tcp`, its defaults otherwise (threads = cores, no splice), one frontend per TCP
 * port. HAProxy has no UDP. `maxconn` allows the idle test's connections under the 20 000-fd limit.
 */
export function haproxyConfig(layout: Layout): string {
  const lines = [
    'global',
    '  maxconn 9950',
    '  log stderr format raw local0 err',
    'defaults',
    '  mode tcp',
    '  maxconn 9950',
    '  timeout connect 5s',
    '  timeout client 10m',
    '  timeout server 10m',
  ];
  for (const port of TCP_PORTS) {
    lines.push(
      `listen p${port}`,
      `  bind ${layout.peers.haproxy}:${port}`,
      `  server b ${layout.backend}:${port}`,
    );
  }
  return `${lines.join('\n')}\n`;
}

/** The temp paths nginx insists on for `http`, inside the run's directory. */
function httpTempPaths(dir: string): string[] {
  return ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map(
    (t) => `  ${t}_temp_path ${dir}/${t};`,
  );
}

function nginxMain(dir: string, modules: string[]): string[] {
  return [
    'daemon off;',
    'master_process on;',
    'worker_processes 2;',
    'user root;',
    `pid ${dir}/nginx.pid;`,
    'error_log stderr error;',
    ...modules.map((m) => `load_module ${m};`),
    'worker_rlimit_nofile 20000;',
    'events { worker_connections 10000; }',
  ];
}

/**
 * nginx stream: 2 workers, `reuseport` on every listener so each worker has its own socket and a
 * UDP flow stays on one worker (without it nginx loses datagrams across workers), TCP and UDP.
 */
export function nginxStreamConfig(layout: Layout, dir: string, streamModule: string): string {
  const ip = layout.peers.nginx;
  const servers: string[] = [];
  for (const port of TCP_PORTS) {
    servers.push(
      `  server { listen ${ip}:${port} reuseport backlog=4096; proxy_pass ${layout.backend}:${port}; }`,
    );
  }
  for (const port of UDP_PORTS) {
    servers.push(
      `  server { listen ${ip}:${port} udp reuseport; proxy_pass ${layout.backend}:${port}; proxy_timeout 10s; }`,
    );
  }
  return `${[...nginxMain(dir, [streamModule]), 'stream {', ...servers, '}'].join('\n')}\n`;
}

/**
 * The HTTP backend wrk measures new connections against: nginx answering a fixed 3-byte body, so the
 * backend costs as little per connection as a real server can.
 */
export function nginxHttpBackendConfig(layout: Layout, dir: string): string {
  return `${[
    ...nginxMain(dir, []),
    'http {',
    '  access_log off;',
    ...httpTempPaths(dir),
    `  server { listen ${layout.backend}:${PORTS.http} reuseport backlog=4096; location / { return 200 "ok\\n"; } }`,
    '}',
  ].join('\n')}\n`;
}

/**
 * The daemon's KubeProxyConfiguration as a user writes it (docs/operations.md): service-port-portal,
 * health and metrics servers on its own loopback address, the manifest beside it.
 */
export function daemonConfig(layout: Layout, id: DaemonId = 'daemon'): string {
  const ip = layout.peers[id];
  return `${[
    'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
    'kind: KubeProxyConfiguration',
    'mode: service-port-portal',
    `bindAddress: ${ip}`,
    `healthzBindAddress: ${ip}:${PORTS.healthz}`,
    `metricsBindAddress: ${ip}:${PORTS.metrics}`,
    'nodePortAddresses: [localhost]',
    'iptables:',
    '  syncPeriod: 30s',
    '  minSyncPeriod: 100ms',
    'udpIdleTimeout: 10s',
    'logging:',
    '  format: text',
    '  verbosity: 0',
    'userspaceProxy:',
    '  servicesFile: services.yaml',
    '  drainTimeout: 1s',
    ...DAEMON_FILE_LINES[id],
  ].join('\n')}\n`;
}

/** One Service on the daemon's address with every benchmark port, its endpoint the backend. */
export function daemonServices(layout: Layout, id: DaemonId = 'daemon'): string {
  const ports = [
    ...TCP_PORTS.map((p) => ({ name: `tcp-${p}`, protocol: 'TCP', port: p })),
    ...UDP_PORTS.map((p) => ({ name: `udp-${p}`, protocol: 'UDP', port: p })),
  ];
  return `${[
    'apiVersion: v1',
    'kind: Service',
    'metadata: { name: bench, namespace: default }',
    'spec:',
    '  type: ClusterIP',
    `  clusterIP: ${layout.peers[id]}`,
    '  ports:',
    ...ports.map(
      (p) =>
        `    - { name: ${p.name}, protocol: ${p.protocol}, port: ${p.port}, targetPort: ${p.port} }`,
    ),
    '---',
    'apiVersion: discovery.k8s.io/v1',
    'kind: EndpointSlice',
    'metadata:',
    '  name: bench-1',
    '  namespace: default',
    '  labels: { kubernetes.io/service-name: bench }',
    'addressType: IPv4',
    'ports:',
    ...ports.map((p) => `  - { name: ${p.name}, protocol: ${p.protocol}, port: ${p.port} }`),
    'endpoints:',
    `  - addresses: ["${layout.backend}"]`,
    '    conditions: { ready: true }',
  ].join('\n')}\n`;
}
