/**
 * Kubernetes scale benchmark: the proxy's Kubernetes path (client-node informers through
 * @userspace-proxy/kubernetes, core's config fan-out, the Proxier) against a fake API server in
 * another process holding 10 000 Services and 100 000 endpoints. Reports the time to the first full
 * sync, the time one change takes to reach the listeners, and the proxy process's memory.
 *
 *   npx tsx bench/src/k8s-scale.ts [--smoke] [--services N] [--endpoints N] [--real-sockets] [--write]
 *
 * Bounded: the whole run is aborted after --timeout seconds (default 300).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const SELF = fileURLToPath(import.meta.url);
const CONDITION = '@userspace-proxy/source';
const tsxLoader = pathToFileURL(
  join(dirname(createRequire(import.meta.url).resolve('tsx/package.json')), 'dist/loader.mjs'),
).href;
const EXEC_ARGV = ['--import', tsxLoader, `--conditions=${CONDITION}`, '--expose-gc'];

interface Options {
  services: number;
  endpoints: number;
  changes: number;
  timeoutS: number;
  realSockets: boolean;
  write: boolean;
}

function parseArgs(argv: string[]): Options {
  const smoke = argv.includes('--smoke');
  const num = (flag: string, def: number) => {
    const i = argv.indexOf(flag);
    const v = i >= 0 ? Number(argv[i + 1]) : def;
    if (!Number.isFinite(v) || v <= 0) throw new Error(`${flag} needs a positive number`);
    return v;
  };
  return {
    services: num('--services', smoke ? 1_000 : 10_000),
    endpoints: num('--endpoints', smoke ? 10_000 : 100_000),
    changes: num('--changes', smoke ? 3 : 7),
    timeoutS: num('--timeout', 300),
    realSockets: argv.includes('--real-sockets'),
    write: argv.includes('--write'),
  };
}

// ---------------------------------------------------------------------------------------------
// The API server child: seeds the store, then applies changes the parent asks for.

interface ChildCommand {
  id: number;
  op: 'servicePort' | 'sliceAddress';
  index: number;
  value: number;
}

function serviceObject(i: number, port: number) {
  const ip = `127.${1 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;
  return {
    metadata: { name: `svc-${i}`, namespace: `ns-${i % 100}` },
    spec: {
      type: 'ClusterIP',
      clusterIP: ip,
      clusterIPs: [ip],
      ports: [{ name: 'http', protocol: 'TCP', port, targetPort: 8080 }],
    },
  };
}

function sliceObject(i: number, perService: number, base: number) {
  return {
    metadata: {
      name: `svc-${i}-abcde`,
      namespace: `ns-${i % 100}`,
      labels: {
        'kubernetes.io/service-name': `svc-${i}`,
        'endpointslice.kubernetes.io/managed-by': 'bench',
      },
    },
    addressType: 'IPv4',
    endpoints: Array.from({ length: perService }, (_, e) => {
      const n = base + i * perService + e;
      return {
        addresses: [`10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: `node-${e % 50}`,
      };
    }),
    ports: [{ name: 'http', protocol: 'TCP', port: 8080 }],
  };
}

async function serve(services: number, endpoints: number): Promise<void> {
  const { FakeApiServer } = await import(
    '../../packages/kubernetes/src/test-support/fake-apiserver.js'
  );
  const server = await FakeApiServer.start();
  const per = Math.max(1, Math.round(endpoints / services));
  server.store.seed(
    'services',
    Array.from({ length: services }, (_, i) => serviceObject(i, 18_080)),
  );
  server.store.seed(
    'endpointslices',
    Array.from({ length: services }, (_, i) => sliceObject(i, per, 0)),
  );
  server.store.seed('nodes', [
    {
      metadata: { name: 'bench-node' },
      status: { addresses: [{ type: 'InternalIP', address: '192.0.2.1' }] },
    },
  ]);
  process.on('message', (msg: ChildCommand) => {
    if (msg.op === 'servicePort')
      server.store.update('services', serviceObject(msg.index, msg.value));
    else server.store.update('endpointslices', sliceObject(msg.index, per, msg.value));
    process.send?.({ id: msg.id });
  });
  process.send?.({ url: server.url, perService: per });
}

// ---------------------------------------------------------------------------------------------
// The proxy side, in this process.

interface Result {
  services: number;
  endpoints: number;
  informerSyncMs: number;
  firstSyncMs: number;
  serviceChangeMs: number[];
  endpointChangeMs: number[];
  baselineRssMiB: number;
  /** The 1-minute load average when the run ended: other work on the machine inflates the times. */
  load: number;
  rssMiB: number;
  heapMiB: number;
}

const median = (xs: number[]) =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

async function until(check: () => boolean, what: string, deadline: number): Promise<void> {
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

async function measure(opts: Options): Promise<Result> {
  const deadline = Date.now() + opts.timeoutS * 1000;
  const child: ChildProcess = fork(
    SELF,
    ['--serve', String(opts.services), String(opts.endpoints)],
    {
      execArgv: EXEC_ARGV,
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    },
  );
  const replies = new Map<number, () => void>();
  const ready = new Promise<{ url: string; perService: number }>((resolve, reject) => {
    child.on('message', (m: { id?: number; url?: string; perService?: number }) => {
      if (m.url) resolve({ url: m.url, perService: m.perService ?? 1 });
      else if (m.id !== undefined) replies.get(m.id)?.();
    });
    child.on('exit', (code) => reject(new Error(`API server child exited with ${code}`)));
  });
  let nextId = 1;
  const ask = (op: ChildCommand['op'], index: number, value: number) =>
    new Promise<void>((resolve) => {
      const id = nextId++;
      replies.set(id, resolve);
      child.send({ id, op, index, value } satisfies ChildCommand);
    });

  const ac = new AbortController();
  try {
    const { url } = await ready;
    const core = await import('@userspace-proxy/core');
    const k8s = await import('../../packages/kubernetes/src/index.js');
    // By default listeners bind nothing: the figure is the Kubernetes → Proxier path, not 10k binds.
    // --real-sockets uses core's TCP/UDP proxy sockets, one real listener per Service port.
    const real = opts.realSockets ? core.createProxySocketFactory() : undefined;
    const open = new Set<string>();
    const makeProxySocket: import('@userspace-proxy/core').ProxySocketFactory = async (
      protocol,
      ip,
      port,
    ) => {
      const key = `${protocol} ${ip}:${port}`;
      let end = () => {};
      const socket = real
        ? await real(protocol, ip, port)
        : {
            addr: () => ({ address: ip ?? '0.0.0.0', port }),
            listenPort: () => port,
            proxyLoop: () => new Promise<void>((resolve) => (end = resolve)),
            close: async () => end(),
          };
      open.add(key);
      return {
        addr: () => socket.addr(),
        listenPort: () => socket.listenPort(),
        proxyLoop: (svc, info, lb) => socket.proxyLoop(svc, info, lb),
        close: async () => {
          open.delete(key);
          await socket.close();
        },
      };
    };

    globalThis.gc?.();
    const baseline = process.memoryUsage().rss;
    const t0 = performance.now();
    // --master alone: anonymous access to the fake server, as the daemon's `--master URL` gives.
    const sources = await k8s.createKubernetesSources({ master: url, nodeName: 'bench-node' });
    const lb = new core.RoundRobinLoadBalancer();
    const proxier = await core.newCustomProxier(
      { mode: 'service-port-portal', loadBalancer: lb, recorder: sources.recorder },
      makeProxySocket,
    );
    const slices = sources.endpointSlices as NonNullable<typeof sources.endpointSlices>;
    const serviceConfig = new core.ServiceConfig(sources.services);
    const sliceConfig = new core.EndpointSliceConfig(slices);
    serviceConfig.registerEventHandler(proxier);
    sliceConfig.registerEventHandler(proxier);
    const tasks = [
      sources.run(ac.signal),
      serviceConfig.run(ac.signal),
      sliceConfig.run(ac.signal),
      proxier.syncLoop(ac.signal),
    ];

    await until(
      () => sources.services.hasSynced() && slices.hasSynced(),
      'informer sync',
      deadline,
    );
    const informerSyncMs = performance.now() - t0;
    await until(
      () => proxier.isInitialized() && open.size >= opts.services,
      'first full sync',
      deadline,
    );
    const firstSyncMs = performance.now() - t0;
    globalThis.gc?.();
    const mem = process.memoryUsage();

    const serviceChangeMs: number[] = [];
    for (let c = 1; c <= opts.changes; c++) {
      await new Promise((resolve) => setTimeout(resolve, 1_100)); // one change per minSyncPeriod
      const ip = `127.1.0.${c % 256}`;
      const port = 20_000 + c;
      const start = performance.now();
      await ask('servicePort', c % 256, port);
      await until(() => open.has(`TCP ${ip}:${port}`), 'service change', deadline);
      serviceChangeMs.push(performance.now() - start);
    }
    const endpointChangeMs: number[] = [];
    for (let c = 1; c <= opts.changes; c++) {
      const index = 300 + c;
      const base = 5_000_000 + c * 10;
      const n = base + index * Math.max(1, Math.round(opts.endpoints / opts.services));
      const expected = `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}:8080`;
      const svcPort = { namespace: `ns-${index % 100}`, name: `svc-${index}`, port: 'http' };
      const start = performance.now();
      await ask('sliceAddress', index, base);
      await until(() => lb.endpoints(svcPort).includes(expected), 'endpoint change', deadline);
      endpointChangeMs.push(performance.now() - start);
    }
    ac.abort();
    await Promise.allSettled(tasks);
    await proxier.shutdown();
    return {
      services: opts.services,
      endpoints: opts.endpoints,
      informerSyncMs,
      firstSyncMs,
      serviceChangeMs,
      endpointChangeMs,
      baselineRssMiB: baseline / 2 ** 20,
      load: loadavg()[0] ?? 0,
      rssMiB: mem.rss / 2 ** 20,
      heapMiB: mem.heapUsed / 2 ** 20,
    };
  } finally {
    ac.abort();
    child.kill();
  }
}

function markdown(r: Result, realSockets: boolean): string {
  const ms = (x: number) =>
    x < 10 ? `${x.toFixed(1)} ms` : `${Math.round(x).toLocaleString('en-US')} ms`;
  return [
    `${r.services.toLocaleString('en-US')} Services, ${r.endpoints.toLocaleString('en-US')} endpoints (one EndpointSlice per Service), daemon defaults (minSyncPeriod 1 s, syncPeriod 30 s), ${realSockets ? 'real TCP listeners' : 'listeners that bind nothing'}:`,
    '',
    '| measure | value |',
    '|---|---|',
    `| initial list delivered (informers synced) | ${ms(r.informerSyncMs)} |`,
    `| first full sync (every Service port listening) | ${ms(r.firstSyncMs)} |`,
    `| Service port change → new listener (median / max of ${r.serviceChangeMs.length}) | ${ms(median(r.serviceChangeMs))} / ${ms(Math.max(...r.serviceChangeMs))} |`,
    `| EndpointSlice change → load balancer (median / max of ${r.endpointChangeMs.length}) | ${ms(median(r.endpointChangeMs))} / ${ms(Math.max(...r.endpointChangeMs))} |`,
    `| proxy process RSS after the first sync (after GC) | ${Math.round(r.rssMiB)} MiB (${Math.round(r.rssMiB - r.baselineRssMiB)} MiB above the ${Math.round(r.baselineRssMiB)} MiB of the loaded code) |`,
    `| of which JS heap in use | ${Math.round(r.heapMiB)} MiB |`,
    '',
    `Load average ${r.load.toFixed(1)} on ${availableParallelism()} cores when the run ended (the API server child and other work included).`,
  ].join('\n');
}

/** Replaces the figures between this mode's markers in docs/benchmarks.md, nothing else. */
function writeDocs(md: string, realSockets: boolean): void {
  const tag = realSockets ? 'k8s-scale-real' : 'k8s-scale';
  const start = `<!-- ${tag}:start -->`;
  const end = `<!-- ${tag}:end -->`;
  const file = fileURLToPath(new URL('../../docs/benchmarks.md', import.meta.url));
  const text = readFileSync(file, 'utf8');
  const i = text.indexOf(start);
  const j = text.indexOf(end);
  if (i < 0 || j < i) throw new Error(`docs/benchmarks.md has no ${start} … ${end} block`);
  writeFileSync(file, `${text.slice(0, i + start.length)}\n${md}\n${text.slice(j)}`);
}

async function main(argv: string[]): Promise<void> {
  if (argv[0] === '--serve') return serve(Number(argv[1]), Number(argv[2]));
  if (argv.includes('--help')) {
    console.log(
      'usage: npx tsx bench/src/k8s-scale.ts [--smoke] [--services N] [--endpoints N] [--changes N] [--timeout S] [--real-sockets] [--write]',
    );
    return;
  }
  if (!process.execArgv.some((a) => a.includes(CONDITION))) {
    // Re-run with the source condition so workspace packages resolve to their TypeScript sources.
    const child = fork(SELF, argv, { execArgv: EXEC_ARGV, stdio: 'inherit' });
    const code = await new Promise<number>((resolve) => child.on('exit', (c) => resolve(c ?? 1)));
    process.exit(code);
  }
  const opts = parseArgs(argv);
  const result = await measure(opts);
  const md = markdown(result, opts.realSockets);
  console.log(md);
  if (opts.write) writeDocs(md, opts.realSockets);
  process.exit(0);
}

await main(process.argv.slice(2));
