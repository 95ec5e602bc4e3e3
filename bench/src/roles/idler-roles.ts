import diagnosticsChannel from 'node:diagnostics_channel';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import v8 from 'node:v8';
import {
  createProxySocketFactory,
  type ProxySocket,
  RoundRobinLoadBalancer,
  type ServiceInfo,
  type ServicePortName,
} from '@userspace-proxy/core';
import { createSocketContext, type StandaloneSocketContext } from '@userspace-proxy/core/sockets';
import { createIdlingProxySocketFactory, Idler } from '@userspace-proxy/idler';
import { type NativeTcpFactory, withNativeTcp } from '@userspace-proxy/native';

/**
 * The three processes of the idler benchmark (bench/src/idler-bench.ts): the proxy (idling sockets
 * of one Idler, nothing else, so its RSS is theirs), the clients that get held, and the backend
 * that counts first bytes (or the C backend, roles/idler-native-backend.ts). Times cross processes
 * as CLOCK_MONOTONIC, in ms.
 */

/**
 * Milliseconds on CLOCK_MONOTONIC, the clock `process.hrtime` reads: one clock for every process
 * of the machine, the C backend's included. (`performance.timeOrigin + performance.now()`, used
 * before, adds each process's own reading of the wall clock at its start: about 1 ms apart between
 * processes, measured.)
 */
const clock = (): number => Number(process.hrtime.bigint()) / 1e6;
const octet = () => 1 + Math.floor(Math.random() * 250);

/** Memory of the proxy process after two full collections. */
export interface IdlerMemory {
  rss: number;
  heapUsed: number;
  /** What V8's young generation has committed: it grows in steps while objects survive, once. */
  newSpace: number;
  /** RSS of the native helper (`--data-path native`; 0 on the Node path), from /proc. */
  helperRss: number;
}

/** The native data path's helper, when the proxy runs it. */
let native: NativeTcpFactory | undefined;

/** VmRSS of a process, bytes (0 when it cannot be read). */
function processRss(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** User + system CPU of a process, seconds (fields 14 and 15 of /proc/<pid>/stat, 100 ticks/s). */
function processCpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

function memory(): IdlerMemory {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  gc?.();
  const m = process.memoryUsage();
  const young = v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
  return {
    rss: m.rss,
    heapUsed: m.heapUsed,
    newSpace: young?.space_size ?? 0,
    helperRss: processRss(native?.helperPid()),
  };
}

let idler: Idler | undefined;
let lb: RoundRobinLoadBalancer | undefined;
const contexts: StandaloneSocketContext[] = [];
const sockets: ProxySocket[] = [];
let dialErrors = 0;
let cpuAtHandOver: NodeJS.CpuUsage | undefined;
let helperCpuAtHandOver = 0;

/** The proxy: `ports` idling sockets on one random 127.x address. */
export const idlerProxyMethods = {
  async start(
    ports: number,
    perPort: number,
    handOverConcurrency?: number,
    dataPath: 'node' | 'native' = 'node',
  ): Promise<{ ip: string; ports: number[] }> {
    const ip = `127.202.${octet()}.${octet()}`;
    lb = new RoundRobinLoadBalancer();
    idler = new Idler({
      maxHeldPerServicePort: perPort,
      maxHeldTotal: ports * perPort,
      ...(handOverConcurrency === undefined ? {} : { handOverConcurrency }),
    });
    // --data-path native: the helper holds the clients and relays; the Idler decides in Node.
    native = dataPath === 'native' ? withNativeTcp(createProxySocketFactory()) : undefined;
    const tcp = native?.withAcceptPolicy;
    const factory = createIdlingProxySocketFactory({ idler, ...(tcp ? { tcp } : {}) });
    const info = { isAlive: () => true, udpIdleTimeoutMs: 10_000, activeClients: new Map() };
    for (let i = 0; i < ports; i++) {
      const servicePort: ServicePortName = {
        namespace: 'bench',
        name: `svc-${i}`,
        port: 'p',
        protocol: 'TCP',
      };
      const context = createSocketContext({ loadBalancer: lb, ip, servicePort });
      const socket = await factory(context);
      void socket.proxyLoop(info as unknown as ServiceInfo);
      contexts.push(context);
      sockets.push(socket);
    }
    diagnosticsChannel.subscribe('userspace-proxy:dial:error', () => {
      dialErrors++;
    });
    return { ip, ports: sockets.map((s) => s.addr().port) };
  },
  /**
   * Memory now, or after `settleMs` without traffic: V8 shrinks its young generation again at a
   * collection that finds the allocation rate low (under about 1 MB/s over its last 5 s), which
   * a proxy that holds clients reaches soon after they stop arriving.
   */
  async memory(settleMs = 0): Promise<IdlerMemory> {
    if (settleMs > 0) await new Promise((resolve) => setTimeout(resolve, settleMs));
    const m = memory();
    // By hand: a heap snapshot of the held state, to see where the bytes are.
    // The one before any client is held goes beside it (`.before`), to diff the two.
    const file = process.env.BENCH_IDLER_SNAPSHOT;
    if (file !== undefined && idler !== undefined) {
      v8.writeHeapSnapshot(idler.stats().heldNow > 0 ? file : `${file}.before`);
    }
    return m;
  },
  held: (): number => idler?.stats().heldNow ?? 0,
  /**
   * One endpoint event per Service port: Service port i to `backendPorts[i]` (each its own
   * backend listener, as Services each have their own pods) or, with one port given, all to it.
   * Returns when it started.
   */
  handOver(backendIp: string, backendPorts: readonly number[]): { t0: number; eventsMs: number } {
    cpuAtHandOver = process.cpuUsage();
    helperCpuAtHandOver = processCpuSeconds(native?.helperPid());
    const t0 = clock();
    for (const [i, context] of contexts.entries()) {
      const port = backendPorts[i % backendPorts.length] ?? 0;
      lb?.onEndpointsAdd({
        metadata: { namespace: 'bench', name: context.servicePort.name },
        subsets: [{ addresses: [{ ip: backendIp }], ports: [{ name: 'p', port }] }],
      });
      context.notifyEndpointsChanged();
    }
    return { t0, eventsMs: clock() - t0 };
  },
  /** The counters, and the proxy's CPU time since the hand-over started (s): Node's, the helper's. */
  stats: () => {
    const cpu = process.cpuUsage(cpuAtHandOver);
    const cpuSeconds = (cpu.user + cpu.system) / 1e6;
    const helperCpuSeconds =
      native === undefined ? 0 : processCpuSeconds(native.helperPid()) - helperCpuAtHandOver;
    return {
      ...(idler?.stats() ?? {}),
      heldByServicePort: {},
      dialErrors,
      cpuSeconds,
      helperCpuSeconds,
    };
  },
  async stop(): Promise<void> {
    idler?.close();
    for (const socket of sockets.splice(0)) await socket.close();
    await native?.close();
  },
};

const clients: net.Socket[] = [];

/** The clients: each connects, sends one byte, and waits (the proxy holds it). */
export const idlerClientMethods = {
  /** Opens `perPort` clients to each of `ports`, 256 connects at a time; resolves once all are up. */
  connect(ip: string, ports: number[], perPort: number): Promise<number> {
    const targets = ports.flatMap((port) => Array.from({ length: perPort }, () => port));
    let next = 0;
    let connected = 0;
    let failed = 0;
    return new Promise((resolve, reject) => {
      const open = (): void => {
        const port = targets[next++];
        if (port === undefined) return;
        const socket = net.connect({ host: ip, port }, () => {
          socket.write('x');
          connected++;
          if (connected === targets.length) resolve(connected);
          open();
        });
        socket.on('error', (error) => {
          if (++failed === 1) reject(new Error(`a held client failed: ${String(error)}`));
        });
        clients.push(socket);
      };
      for (let i = 0; i < Math.min(256, targets.length); i++) open();
    });
  },
  stop(): void {
    for (const socket of clients.splice(0)) socket.destroy();
  },
};

const backends: net.Server[] = [];
let firstBytes = 0;
let lastFirstByteAt = 0;
let expected = 0;
let allArrived: (() => void) | undefined;

/** What each backend connection does: count its first byte, then end. */
function onBackendConnection(socket: net.Socket): void {
  socket.on('error', () => {});
  socket.once('data', () => {
    lastFirstByteAt = clock();
    firstBytes++;
    socket.end();
    if (firstBytes === expected) allArrived?.();
  });
}

/**
 * The backend: `listeners` listening sockets on one address (one per Service port by default, as
 * each Service has pods of its own; one shared by every Service with `--one-backend-port`, whose
 * single accept queue the hand-over's burst overflows). Counts each connection's first byte, then
 * ends the connection, so the proxy's descriptors are freed as the hand-over goes (10 000 held
 * clients and their backend legs would not fit the 20 000 descriptors of one process at once).
 */
export const idlerBackendMethods = {
  async start(count: number, listeners = 1): Promise<{ ip: string; ports: number[] }> {
    expected = count;
    const ip = `127.203.${octet()}.${octet()}`;
    const ports: number[] = [];
    for (let i = 0; i < listeners; i++) {
      const server = net.createServer(onBackendConnection);
      backends.push(server);
      ports.push(
        await new Promise<number>((resolve) => {
          server.listen({ host: ip, port: 0, backlog: 65_535 }, () => {
            resolve((server.address() as net.AddressInfo).port);
          });
        }),
      );
    }
    return { ip, ports };
  },
  /** Resolves with when the last expected first byte arrived, or what had arrived by `timeoutMs`. */
  waitAll(timeoutMs: number): Promise<{ firstBytes: number; lastAt: number; cpuMs: number }> {
    // The backend is idle until the hand-over: its CPU from here is the hand-over's.
    const cpu = process.cpuUsage();
    const done = () => {
      const used = process.cpuUsage(cpu);
      return { firstBytes, lastAt: lastFirstByteAt, cpuMs: (used.user + used.system) / 1000 };
    };
    if (firstBytes >= expected) return Promise.resolve(done());
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(done()), timeoutMs);
      allArrived = () => {
        clearTimeout(timer);
        resolve(done());
      };
    });
  },
  stop(): void {
    for (const server of backends.splice(0)) server.close();
  },
};
