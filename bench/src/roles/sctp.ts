/**
 * The SCTP benchmark's processes (one role, three processes: the sink, the proxy and the load):
 * our engine over RFC 6951 UDP on loopback, the proxy as the daemon runs it (a Proxier in
 * service-port-portal mode whose factory is `withSctp`), and usrsctp's `tsctp` as the native anchor.
 * The proxy runs on node:dgram (`udpIo: 'node'`) or on the C UDP helper (`udpIo: 'helper'`), whose
 * CPU time (from /proc) the `stats` method adds to the process's.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import {
  createProxySocketFactory,
  newCustomProxier,
  type Proxier,
  type ServicePortName,
} from '@userspace-proxy/core';
import {
  createUserspaceSctpEngine,
  type SctpAssociation,
  type SctpEngine,
  UserspaceSctpEngine,
  withSctp,
} from '@userspace-proxy/sctp';
import { processStats } from '../rpc.js';
import { until } from './proxy-host.js';

/** Where an SCTP listener is reached. */
export interface SctpTarget {
  address: string;
  port: number;
  encapsulationPort: number;
}

/** What one load run measured (counted by the sink, so only delivered messages count). */
export interface SctpRun {
  messages: number;
  bytes: number;
  seconds: number;
}

/** The marker PPID: the sink answers it with its counts for the association. */
const MARKER_PPID = 99;
const SERVICE_PORT = 5100;
const octet = () => 1 + Math.floor(Math.random() * 250);
const port = () => 20000 + Math.floor(Math.random() * 30000);

let engine: SctpEngine | undefined;
let proxier: Proxier | undefined;
/** The proxy's own engine (its UDP helper's CPU counts as the proxy's). */
let proxyEngine: UserspaceSctpEngine | undefined;

/** CPU seconds of the proxy's UDP helper so far (utime + stime, clock ticks of 10 ms), or 0. */
function helperCpuSeconds(): number {
  const pid = proxyEngine?.udpHelperPid;
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return 0;
  }
}

function theEngine(): SctpEngine {
  engine ??= createUserspaceSctpEngine();
  return engine;
}

/** The sink: counts messages and bytes per association, answers the marker with its counts. */
async function startSink(): Promise<SctpTarget> {
  const address = `127.202.${octet()}.${octet()}`;
  const encapsulationPort = port();
  const l = await theEngine().listen({ address, port: 5000, encapsulationPort });
  l.on('association', (a) => {
    let messages = 0;
    let bytes = 0;
    a.on('message', (m) => {
      if (m.ppid === MARKER_PPID) {
        a.send({ ppid: MARKER_PPID, data: Buffer.from(JSON.stringify({ messages, bytes })) });
        return;
      }
      messages++;
      bytes += m.data.length;
    });
  });
  return { address, port: 5000, encapsulationPort };
}

/** The proxy in front of `sink`: a Service with one SCTP port, served as the daemon serves it. */
async function startProxy(
  sink: SctpTarget,
  udpIo: 'node' | 'helper' = 'node',
): Promise<SctpTarget> {
  const host = `127.203.${octet()}.${octet()}`;
  const encapsulationPort = port();
  proxyEngine = new UserspaceSctpEngine({ udpIo });
  await proxyEngine.start();
  const factory = withSctp(createProxySocketFactory({}), {
    encapsulationPort,
    endpointEncapsulationPort: sink.encapsulationPort,
    engine: proxyEngine,
  });
  const p = await newCustomProxier({ mode: 'service-port-portal', minSyncPeriodMs: 0 }, factory);
  proxier = p;
  void p.syncLoop();
  const meta = { name: 'sctp-bench', namespace: 'default' };
  p.onEndpointsAdd({
    metadata: meta,
    subsets: [
      {
        addresses: [{ ip: sink.address }],
        ports: [{ name: 'sctp', port: sink.port, protocol: 'SCTP' }],
      },
    ],
  });
  p.onEndpointsSynced();
  p.onServiceAdd({
    metadata: meta,
    spec: {
      clusterIP: host,
      ports: [{ name: 'sctp', protocol: 'SCTP', port: SERVICE_PORT }],
    },
  });
  p.onServiceSynced();
  const name: ServicePortName = { ...meta, port: 'sctp' };
  await until(() => p.getServiceInfo(name, host)?.isStarted() === true, 10_000, 'SCTP portal');
  return { address: host, port: SERVICE_PORT, encapsulationPort };
}

/** Sends `size`-byte messages for `ms` as fast as backpressure lets it, then asks the sink. */
async function blast(target: SctpTarget, size: number, ms: number): Promise<SctpRun> {
  const a: SctpAssociation = await theEngine().connect({
    address: target.address,
    port: target.port,
    encapsulationPort: target.encapsulationPort,
    localAddress: '127.0.0.1',
    signal: AbortSignal.timeout(10_000),
  });
  try {
    const data = Buffer.alloc(size, 0x5a);
    const start = performance.now();
    const end = start + ms;
    while (performance.now() < end) {
      // A batch between clock reads; backpressure ('drain') paces it.
      for (let i = 0; i < 64; i++) {
        if (!a.send({ data })) {
          await new Promise<void>((r) => a.once('drain', () => r()));
          break;
        }
      }
      if (a.bufferedAmount > 0) await new Promise((r) => setImmediate(r));
    }
    const counts = new Promise<{ messages: number; bytes: number }>((resolve, reject) => {
      a.on('message', (m) => {
        if (m.ppid === MARKER_PPID) resolve(JSON.parse(m.data.toString()));
      });
      a.once('close', (i) => reject(new Error(`association closed: ${i.reason} ${i.detail}`)));
    });
    a.send({ ppid: MARKER_PPID, data: Buffer.from('?') });
    const got = await counts;
    return { ...got, seconds: (performance.now() - start) / 1000 };
  } finally {
    a.abort('benchmark done');
  }
}

const TSCTP = process.env.USRSCTP_DIR
  ? `${process.env.USRSCTP_DIR}/tsctp`
  : '/usr/lib/usrsctp/tsctp';

/**
 * usrsctp's tsctp to tsctp over UDP encapsulation on loopback: the native anchor. The receiver
 * prints "first_length, messages, recv_calls, sum, seconds, throughput, ..." per association.
 * Undefined when tsctp is not installed (Debian libusrsctp-examples).
 */
async function tsctp(size: number, ms: number): Promise<SctpRun | undefined> {
  if (!existsSync(TSCTP)) return undefined;
  const theirs = port();
  const ours = theirs + 1;
  const sctpPort = 5000 + Math.floor(Math.random() * 1000);
  const rx = spawn(TSCTP, ['-E', String(theirs), '-U', String(ours), '-p', String(sctpPort)], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  let out = '';
  rx.stdout.on('data', (d: Buffer) => {
    out += d.toString('latin1');
  });
  try {
    await new Promise((r) => setTimeout(r, 200));
    // -T takes whole seconds; short (smoke) runs send a count instead.
    const amount =
      ms >= 1000 ? ['-T', String(Math.round(ms / 1000))] : ['-n', String(size > 1000 ? 200 : 5000)];
    const tx = spawn(
      TSCTP,
      [
        '-E',
        String(ours),
        '-U',
        String(theirs),
        '-p',
        String(sctpPort),
        '-l',
        String(size),
        ...amount,
        '127.0.0.1',
      ],
      { stdio: 'ignore' },
    );
    const killTx = setTimeout(() => tx.kill('SIGKILL'), ms + 20_000);
    await new Promise((r) => tx.once('exit', r));
    clearTimeout(killTx);
    await until(() => /^\d+, \d+, \d+, \d+, [\d.]+/m.test(out), 10_000, 'tsctp summary');
    const m = /^(\d+), (\d+), (\d+), (\d+), ([\d.]+)/m.exec(out) as RegExpExecArray;
    return { messages: Number(m[2]), bytes: Number(m[4]), seconds: Number(m[5]) };
  } finally {
    rx.kill('SIGKILL');
  }
}

/** The methods the orchestrator calls. */
export const sctpMethods = {
  startSink,
  startProxy,
  blast,
  tsctp,
  /** The process's stats, its UDP helper's CPU included. */
  stats: () => {
    const st = processStats();
    return { ...st, cpuSeconds: st.cpuSeconds + helperCpuSeconds() };
  },
  stop: async () => {
    await proxier?.shutdown();
    await proxyEngine?.close();
    await engine?.close();
  },
};
