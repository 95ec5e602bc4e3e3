// Longer than 400 lines because it is one script: its phases (start, list, changes, snapshots, report)
// share the daemon process and the fake API server, and each is only read with the others.
/**
 * Kubernetes scale benchmark: the real `userspace-proxy` daemon process, run with `--master` against
 * the test suite's fake API server (in this process) holding 10 000 Services and 100 000 endpoints, in
 * service-port-portal mode with one real TCP listener per Service on its own 127.x address. Reports
 * the time to the first full sync, the time one change takes to reach the listeners, and the
 * daemon's memory. Bounded: the run ends with an error after --timeout seconds (default 300).
 *
 *   npx tsx bench/src/k8s-scale.ts [--smoke] [--services N] [--endpoints N] [--changes N] [--built] [--write]
 *     [--heap-snapshot DIR] [--gc] [--smaps] [--node-arg ARG]... [--data-path node|native]
 *
 * --heap-snapshot DIR: the daemon writes a V8 heap snapshot into DIR right after the first sync
 * (`--heapsnapshot-signal`, signalled by its pid), for finding where the memory goes.
 * --gc: after the first sync, the daemon (started with `--expose-gc` and a one-line `--import` that
 * calls `gc()` on SIGWINCH) runs a full GC, and its RSS and heap are read again: what of the RSS
 * after the sync is live data and what is garbage not yet collected.
 * --node-arg ARG: passed to the daemon's node (repeatable), e.g. `--max-semi-space-size=1`.
 * --smaps: print where the daemon's RSS is after the first sync (and the GC), from /proc/PID/smaps.
 * --data-path native: the daemon's `dataPath: native` (the listeners are the C helper's); RSS is
 * then the process tree's, the daemon's and its helper's.
 *
 * Longer than 400 lines because it is one scenario read top to bottom: the fake cluster, the daemon
 * process, the measures taken in order, and the table they make.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, connect, createServer, type Server } from 'node:net';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FakeApiServer } from '../../packages/kubernetes/src/test-support/fake-apiserver.js';
import { parseExposition } from '../../packages/server/src/test-support/prom-text.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SERVERS_IP = '127.99.0.1'; // the daemon's health and metrics servers
const BACKENDS = ['127.99.0.2', '127.99.0.3']; // the one Service that gets traffic
const PORT = 8080;

interface Options {
  services: number;
  endpoints: number;
  changes: number;
  timeoutS: number;
  built: boolean;
  write: boolean;
  heapSnapshotDir: string | undefined;
  gc: boolean;
  nodeArgs: string[];
  dataPath: 'node' | 'native';
  /** --smaps: print where the daemon's RSS is (its /proc/PID/smaps, summed) after the first sync. */
  smaps: boolean;
}

function parseArgs(argv: string[]): Options {
  const smoke = argv.includes('--smoke');
  const num = (flag: string, def: number) => {
    const i = argv.indexOf(flag);
    const v = i >= 0 ? Number(argv[i + 1]) : def;
    if (!Number.isInteger(v) || v <= 0) throw new Error(`${flag} needs a positive integer`);
    return v;
  };
  const services = num('--services', smoke ? 1_000 : 10_000);
  const endpoints = num('--endpoints', smoke ? 10_000 : 100_000);
  if (services > 60_000) throw new Error('--services: at most 60 000 (one 127.100+ address each)');
  if (endpoints > 3_000_000) throw new Error('--endpoints: at most 3 000 000');
  return {
    services,
    endpoints,
    changes: num('--changes', smoke ? 3 : 7),
    timeoutS: num('--timeout', 300),
    built: argv.includes('--built'),
    write: argv.includes('--write'),
    heapSnapshotDir: heapSnapshotDir(argv),
    gc: argv.includes('--gc'),
    smaps: argv.includes('--smaps'),
    nodeArgs: argv.flatMap((a, i) => (argv[i - 1] === '--node-arg' ? [a] : [])),
    dataPath: dataPath(argv),
  };
}

function dataPath(argv: string[]): 'node' | 'native' {
  const i = argv.indexOf('--data-path');
  const v = i < 0 ? 'node' : argv[i + 1];
  if (v !== 'node' && v !== 'native') throw new Error('--data-path: node or native');
  return v;
}

function heapSnapshotDir(argv: string[]): string | undefined {
  const i = argv.indexOf('--heap-snapshot');
  if (i < 0) return undefined;
  const dir = argv[i + 1];
  if (dir === undefined || dir.startsWith('--'))
    throw new Error('--heap-snapshot needs a directory');
  return dir;
}

/** Service i listens on 127.100.0.0 + i. */
const ipOf = (i: number) => `127.${100 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;

function service(i: number, port = PORT) {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: `svc-${i}`, namespace: `ns-${i % 100}` },
    spec: {
      type: 'ClusterIP',
      clusterIP: ipOf(i),
      clusterIPs: [ipOf(i)],
      ports: [{ name: 'http', protocol: 'TCP', port, targetPort: 8080 }],
    },
  };
}

function slice(i: number, addresses: string[], port = 8080) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `svc-${i}-abcde`,
      namespace: `ns-${i % 100}`,
      labels: { 'kubernetes.io/service-name': `svc-${i}` },
    },
    addressType: 'IPv4',
    endpoints: addresses.map((ip, e) => ({
      addresses: [ip],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: `node-${e % 50}`,
    })),
    ports: [{ name: 'http', protocol: 'TCP', port }],
  };
}

/**
 * `per` pod addresses for Service i, on loopback (127.200.0.0 and up) where nothing listens: a
 * connection through such a Service is refused at once and no packet leaves the host.
 */
const podIPs = (i: number, per: number) =>
  Array.from({ length: per }, (_, e) => {
    const n = i * per + e;
    return `127.${200 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}`;
  });

/** Connects, sends "x", resolves with the first answer (or "" on refusal or timeout). */
function ask(ip: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host: ip, port, timeout: 2_000 }, () => socket.write('x'));
    const done = (answer: string) => {
      socket.destroy();
      resolve(answer);
    };
    socket.on('data', (d) => done(d.toString()));
    socket.on('error', () => done(''));
    socket.on('timeout', () => done(''));
    socket.on('close', () => done(''));
  });
}

/** Echo backends that answer with their own address. */
async function startBackends(): Promise<Server[]> {
  return Promise.all(
    BACKENDS.map(
      (ip) =>
        new Promise<Server>((resolve, reject) => {
          const server = createServer((s) => {
            s.on('error', () => {});
            s.on('data', () => s.end(ip));
          });
          server.once('error', reject).listen(0, ip, () => resolve(server));
        }),
    ),
  );
}

/** `pid` and every process under it (the native data path's helper). */
function treePids(pid: number): number[] {
  let children: number[] = [];
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const text = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
      if (text !== '') children = children.concat(text.split(/\s+/).map(Number));
    }
  } catch {
    // gone meanwhile
  }
  return [pid, ...children.flatMap(treePids)];
}

/** RSS and peak RSS of the daemon's process tree, MiB. */
function rssMiB(pid: number): { rss: number; peak: number } {
  let rss = 0;
  let peak = 0;
  for (const p of treePids(pid)) {
    try {
      const status = readFileSync(`/proc/${p}/status`, 'utf8');
      const kb = (key: string) =>
        Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0);
      rss += kb('VmRSS') / 1024;
      peak += kb('VmHWM') / 1024;
    } catch {
      // gone meanwhile
    }
  }
  return { rss, peak };
}

/**
 * Where one process's RSS is, from /proc/PID/smaps (MiB, largest first): summed per mapped file, and
 * anonymous mappings summed by size class, so that the part outside V8's heap has names (the node
 * binary's text, glibc's arenas, thread stacks, the V8 heap's own reservations).
 */
function smapsMiB(pid: number): Array<[string, number]> {
  const sums = new Map<string, number>();
  let name = '';
  let size = 0;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      name = head[1] ?? '';
      continue;
    }
    const m = /^(Size|Rss):\s+(\d+) kB/.exec(line);
    if (!m) continue;
    const kb = Number(m[2]);
    if (m[1] === 'Size') {
      size = kb;
      continue;
    }
    const key =
      name !== ''
        ? name
        : `[anon ${size >= 65_536 ? '>= 64 MiB' : size >= 1_024 ? '1–64 MiB' : '< 1 MiB'}]`;
    sums.set(key, (sums.get(key) ?? 0) + kb / 1024);
  }
  return [...sums].sort((a, b) => b[1] - a[1]);
}

interface Result {
  opts: Options;
  metricsUpMs: number;
  listedMs: number;
  firstSyncMs: number;
  servicePortMs: number[];
  newServiceMs: number[];
  endpointMs: number[];
  rssAtStart: number;
  rss: { rss: number; peak: number };
  rssAfterChanges: number;
  heapMiB: number;
  /** Heap committed, new space committed, external memory (MiB), from the daemon's metrics. */
  heap: HeapFigures;
  /** With --gc: RSS and heap right after a full GC. */
  afterGc: { rss: number; heap: HeapFigures } | undefined;
  stopMs: number;
  load: number;
}

interface HeapFigures {
  used: number;
  total: number;
  newSpace: number;
  oldSpace: number;
  external: number;
}

type Sample = ReturnType<typeof parseExposition>['samples'][number];

function heapFigures(samples: Sample[] | undefined): HeapFigures {
  const mib = (name: string, space?: string) =>
    (samples?.find((s) => s.name === name && (space === undefined || s.labels.space === space))
      ?.value ?? 0) /
    2 ** 20;
  return {
    used: mib('nodejs_heap_size_used_bytes'),
    total: mib('nodejs_heap_size_total_bytes'),
    newSpace: mib('nodejs_heap_space_size_total_bytes', 'new'),
    oldSpace: mib('nodejs_heap_space_size_total_bytes', 'old'),
    external: mib('nodejs_external_memory_bytes'),
  };
}

/** The daemon's node flags for --gc: a full GC on SIGWINCH. */
const GC_ON_SIGNAL = [
  '--expose-gc',
  '--import=data:text/javascript,process.on("SIGWINCH",()=>globalThis.gc())',
];

async function measure(opts: Options): Promise<Result> {
  const deadline = Date.now() + opts.timeoutS * 1000;
  const until = async (check: () => boolean | Promise<boolean>, what: string, pollMs = 5) => {
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      if (daemon.exitCode !== null) throw new Error(`the daemon exited (${daemon.exitCode})`);
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
  };
  const per = Math.max(1, Math.round(opts.endpoints / opts.services));
  const api = await FakeApiServer.start();
  const backends = await startBackends();
  const backendPort = (i: number) => ((backends[i] as Server).address() as AddressInfo).port;
  api.store.seed('nodes', [{ metadata: { name: 'bench-node' } }]);
  api.store.seed(
    'services',
    Array.from({ length: opts.services }, (_, i) => service(i)),
  );
  // Service 0 leads to a real backend; the others to unroutable pod addresses.
  api.store.seed(
    'endpointslices',
    Array.from({ length: opts.services }, (_, i) =>
      i === 0 ? slice(0, [BACKENDS[0] as string], backendPort(0)) : slice(i, podIPs(i, per)),
    ),
  );
  const dir = mkdtempSync(join(tmpdir(), 'k8s-scale-'));
  const config = join(dir, 'config.yaml');
  writeFileSync(
    config,
    `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: service-port-portal
healthzBindAddress: ${SERVERS_IP}:10256
metricsBindAddress: ${SERVERS_IP}:10249
userspaceProxy: { drainTimeout: 0s${opts.dataPath === 'native' ? ', dataPath: native' : ''} }
`,
  );
  const snapshotFlags = opts.heapSnapshotDir
    ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${opts.heapSnapshotDir}`]
    : [];
  const nodeFlags = [...snapshotFlags, ...(opts.gc ? GC_ON_SIGNAL : []), ...opts.nodeArgs];
  const main = opts.built
    ? [...nodeFlags, join(ROOT, 'packages/server/dist/main.js')]
    : [
        ...nodeFlags,
        '--conditions=@userspace-proxy/source',
        '--import',
        'tsx',
        'packages/server/src/main.ts',
      ];
  const args = [
    ...main,
    '--config',
    config,
    '--master',
    api.url,
    '--hostname-override',
    'bench-node',
  ];
  let stderr = '';
  const t0 = performance.now();
  const daemon: ChildProcess = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, KUBERNETES_SERVICE_HOST: '' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  daemon.stderr?.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-20_000);
  });
  const pid = daemon.pid as number;
  const scrape = async () => {
    try {
      const res = await fetch(`http://${SERVERS_IP}:10249/metrics`);
      return parseExposition(await res.text()).samples;
    } catch {
      return undefined;
    }
  };
  const value = async (name: string) => (await scrape())?.find((s) => s.name === name)?.value;
  try {
    await until(async () => (await scrape()) !== undefined, 'the metrics server', 50);
    const metricsUpMs = performance.now() - t0;
    const rssAtStart = rssMiB(pid).rss;
    await until(
      async () =>
        ((await value('kubeproxy_sync_proxy_rules_service_changes_total')) ?? 0) >= opts.services,
      'every Service to reach the proxier',
      50,
    );
    const listedMs = performance.now() - t0;
    await until(
      async () => ((await value('userspace_proxy_service_ports')) ?? 0) >= opts.services,
      'the first full sync',
      50,
    );
    const last = opts.services - 1;
    await until(() => isOpen(ipOf(last), PORT), 'the last listener');
    const firstSyncMs = performance.now() - t0;
    for (const i of [0, last >> 1]) {
      if (!(await isOpen(ipOf(i), PORT))) throw new Error(`svc-${i} does not listen`);
    }
    const rss = rssMiB(pid);
    const heap = heapFigures(await scrape());
    const heapMiB = heap.used;
    let afterGc: Result['afterGc'];
    if (opts.gc) {
      daemon.kill('SIGWINCH');
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      afterGc = { rss: rssMiB(pid).rss, heap: heapFigures(await scrape()) };
    }
    if (opts.smaps) {
      const top = smapsMiB(pid).filter(([, mib]) => mib >= 0.5);
      console.log(
        `where the daemon's RSS is${opts.gc ? ' after the GC' : ''} (MiB, /proc/${pid}/smaps):`,
      );
      for (const [what, mib] of top) console.log(`  ${mib.toFixed(1).padStart(7)}  ${what}`);
    }
    if (opts.heapSnapshotDir) {
      daemon.kill('SIGUSR2');
      // The daemon answers again once the snapshot (written synchronously) is complete.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      await until(async () => (await scrape()) !== undefined, 'the heap snapshot', 500);
    }

    const servicePortMs: number[] = [];
    const newServiceMs: number[] = [];
    const endpointMs: number[] = [];
    const pause = () => new Promise((resolve) => setTimeout(resolve, 1_100)); // > minSyncPeriod
    for (let c = 1; c <= opts.changes; c++) {
      await pause();
      const i = 1 + c;
      let start = performance.now();
      api.store.update('services', service(i, 20_000 + c));
      await until(() => isOpen(ipOf(i), 20_000 + c), 'a port change');
      servicePortMs.push(performance.now() - start);

      await pause();
      const n = opts.services + c;
      start = performance.now();
      api.store.create('services', service(n));
      await until(() => isOpen(ipOf(n), PORT), 'a new Service');
      newServiceMs.push(performance.now() - start);

      const b = c % 2;
      start = performance.now();
      api.store.update('endpointslices', slice(0, [BACKENDS[b] as string], backendPort(b)));
      await until(async () => (await ask(ipOf(0), PORT)) === BACKENDS[b], 'an endpoint change');
      endpointMs.push(performance.now() - start);
    }
    const rssAfterChanges = rssMiB(pid).rss;
    const stopStart = performance.now();
    daemon.kill('SIGTERM');
    const code = await new Promise<number | null>((resolve) => daemon.once('exit', resolve));
    if (code !== 0) throw new Error(`the daemon exited with ${code} on SIGTERM`);
    return {
      opts,
      metricsUpMs,
      listedMs,
      firstSyncMs,
      servicePortMs,
      newServiceMs,
      endpointMs,
      rssAtStart,
      rss,
      rssAfterChanges,
      heapMiB,
      heap,
      afterGc,
      stopMs: performance.now() - stopStart,
      load: loadavg()[0] ?? 0,
    };
  } catch (err) {
    throw new Error(`${(err as Error).message}; the daemon's log ends with:\n${stderr}`);
  } finally {
    if (daemon.exitCode === null) daemon.kill('SIGKILL');
    await api.close();
    for (const b of backends) b.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** True once a TCP connection to ip:port is accepted. */
function isOpen(ip: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, ip);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

const ms = (x: number) =>
  x < 10 ? `${x.toFixed(1)} ms` : `${Math.round(x).toLocaleString('en-US')} ms`;
const median = (xs: number[]) =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const spread = (xs: number[]) => `${ms(median(xs))} / ${ms(Math.max(...xs))}`;

const heapLine = (h: HeapFigures) =>
  `${Math.round(h.total)} MiB (${Math.round(h.newSpace)} / ${Math.round(h.oldSpace)} MiB), ${Math.round(h.external)} MiB`;

function markdown(r: Result): string {
  const n = (x: number) => x.toLocaleString('en-US');
  const per = Math.max(1, Math.round(r.opts.endpoints / r.opts.services));
  return [
    `${n(r.opts.services)} Services, ${n(r.opts.services * per)} endpoints (one EndpointSlice of ${per} per Service), one TCP listener per Service, daemon defaults (minSyncPeriod 1 s, syncPeriod 30 s), run ${r.opts.built ? 'from the build (`--built`)' : 'from the TypeScript sources through tsx'}:`,
    '',
    '| measure (from starting the process) | value |',
    '|---|---|',
    `| metrics server answering (code loaded, sources and Proxier built) | ${ms(r.metricsUpMs)} |`,
    `| every Service delivered to the Proxier (\`kubeproxy_sync_proxy_rules_service_changes_total\`) | ${ms(r.listedMs)} |`,
    `| **first full sync**: every Service port listening, the last one accepting | **${ms(r.firstSyncMs)}** |`,
    '',
    `| one change reaching the listeners (median / max of ${r.servicePortMs.length}) | value |`,
    '|---|---|',
    `| a Service's port changed → its new listener accepts | ${spread(r.servicePortMs)} |`,
    `| a Service added → its listener accepts | ${spread(r.newServiceMs)} |`,
    `| an EndpointSlice changed → the next connection reaches the new endpoint | ${spread(r.endpointMs)} |`,
    '',
    r.opts.dataPath === 'native'
      ? '| memory of the daemon and its native helper (`dataPath: native`; `/proc/PID/status` of each) | value |'
      : '| daemon memory (`/proc/PID/status`) | value |',
    '|---|---|',
    `| RSS when the metrics server first answered (code loaded, lists just starting) | ${Math.round(r.rssAtStart)} MiB |`,
    `| RSS after the first sync | ${Math.round(r.rss.rss)} MiB (peak so far ${Math.round(r.rss.peak)} MiB) |`,
    `| JS heap in use then (\`nodejs_heap_size_used_bytes\`) | ${Math.round(r.heapMiB)} MiB |`,
    `| JS heap committed then (of which new space / old space), external memory | ${heapLine(r.heap)} |`,
    ...(r.afterGc
      ? [
          `| after a full GC (\`--gc\`): RSS, heap in use | ${Math.round(r.afterGc.rss)} MiB, ${Math.round(r.afterGc.heap.used)} MiB |`,
          `| after a full GC: heap committed (new / old), external | ${heapLine(r.afterGc.heap)} |`,
        ]
      : []),
    `| RSS after the changes | ${Math.round(r.rssAfterChanges)} MiB |`,
    '',
    `SIGTERM to exit: ${ms(r.stopMs)} (${n(r.opts.services)} listeners closed). Load average ${r.load.toFixed(1)} on ${availableParallelism()} cores when the run ended (the fake API server in the benchmark process included).`,
  ].join('\n');
}

/** Replaces the figures between the k8s-scale markers in docs/benchmarks.md, nothing else. */
function writeDocs(md: string): void {
  const start = '<!-- k8s-scale:start -->';
  const end = '<!-- k8s-scale:end -->';
  const file = join(ROOT, 'docs/benchmarks.md');
  const text = readFileSync(file, 'utf8');
  const i = text.indexOf(start);
  const j = text.indexOf(end);
  if (i < 0 || j < i) throw new Error(`docs/benchmarks.md has no ${start} … ${end} block`);
  writeFileSync(file, `${text.slice(0, i + start.length)}\n${md}\n${text.slice(j)}`);
}

async function main(argv: string[]): Promise<void> {
  if (argv.includes('--help')) {
    console.log(
      'usage: npx tsx bench/src/k8s-scale.ts [--smoke] [--services N] [--endpoints N] [--changes N] [--timeout S] [--built] [--write] [--heap-snapshot DIR] [--gc] [--smaps] [--node-arg ARG]... [--data-path node|native]',
    );
    return;
  }
  const opts = parseArgs(argv);
  const md = markdown(await measure(opts));
  console.log(md);
  if (opts.write) writeDocs(md);
}

main(process.argv.slice(2)).then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  },
);
