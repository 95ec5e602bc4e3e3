/**
 * CPU cost of the engine per byte and per message, in processes of their own (a sink, a proxy and a
 * load generator, as `pnpm bench --only sctp` runs them), for a fixed amount of work so that the
 * figure depends little on how loaded the machine is:
 * `npx tsx --conditions=@userspace-proxy/source packages/sctp/src/test-support/proxy-cost.ts
 *  [--size 65536] [--mb 200 | --messages 1000000] [--direct] [--prof DIR] [--impl DIR] [--count]
 *  [--udp-io node|helper] [--proxy-udp-io node|helper] [--no-gso] [--no-gro]
 *  [--window BYTES] [--hwm BYTES]`.
 * Prints each process's CPU milliseconds per MB (or microseconds per message) and the rate.
 * `--udp-io helper` runs every process's engine on the C UDP helper, `--proxy-udp-io helper` only
 * the proxy's; a process's CPU then includes its helper's (utime + stime from /proc/<pid>/stat),
 * and the helper's part is printed too; `--no-gso` / `--no-gro` turn the helpers' UDP GSO / GRO off
 * (docs/sctp.md, "Fifth pass").
 * `--prof DIR` writes a V8 CPU profile of the proxy (of the sink with `--direct`) into DIR;
 * `--impl DIR` loads the engine from another copy of `src/` (before/after comparisons), or from a
 * module (a build's `dist/index.js`); `--count` adds the proxy's (the sink's) timers, immediates,
 * microtasks and Buffers made per MB or message. The proxy
 * here is `relayAssociations` between a listener and a connect with the proxy socket's association
 * defaults (the Proxier around it adds nothing per message). Not a test.
 */
import { fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type * as Sctp from '../index.js';

interface Target {
  address: string;
  port: number;
  encapsulationPort: number;
}

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
};

/**
 * The proxy socket's association defaults (proxy-socket-sctp.ts); `--window` and `--hwm` set the
 * relay's receive window and send high-water mark instead (bytes), to compare them in one build.
 */
const PROXY_ASSOCIATION = {
  receiveWindow: Number(arg('--window') ?? 1 << 20),
  sendHighWaterMark: Number(arg('--hwm') ?? 1 << 20),
  maxMessageBytes: 256 * 1024,
  rtoInitial: 200,
  rtoMin: 200,
};

const octet = (): number => 1 + Math.floor(Math.random() * 250);
const randomPort = (): number => 20000 + Math.floor(Math.random() * 30000);
/** The UDP helper's process id, when the engine runs on one. */
let helperPid: () => number | undefined = () => undefined;
/** CPU ms of a process from /proc (utime + stime, in clock ticks of 10 ms), 0 when gone. */
const procCpuMs = (pid: number | undefined): number => {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return 0;
  }
};
const helperCpuMs = (): number => procCpuMs(helperPid());
const cpuMs = (): number => {
  const c = process.cpuUsage();
  return (c.user + c.system) / 1000 + helperCpuMs();
};

/**
 * With `--count`: how often the process arms a platform timer, schedules a setImmediate or a
 * microtask, and makes a Buffer (allocUnsafe, alloc, concat), counted by wrapping the globals.
 */
const calls: Record<string, number> = {};
function countCalls(): void {
  const wrap = <T extends object>(o: T, k: keyof T & string, name: string = k): void => {
    const f = o[k] as unknown as (...a: unknown[]) => unknown;
    calls[name] = 0;
    (o as Record<string, unknown>)[k] = function (this: unknown, ...a: unknown[]) {
      calls[name] = (calls[name] ?? 0) + 1;
      return f.apply(this, a);
    };
  };
  wrap(globalThis, 'setTimeout');
  wrap(globalThis, 'setImmediate');
  wrap(globalThis, 'queueMicrotask');
  wrap(Buffer, 'allocUnsafe', 'Buffer.allocUnsafe');
  wrap(Buffer, 'alloc', 'Buffer.alloc');
  wrap(Buffer, 'concat', 'Buffer.concat');
}

async function child(impl: string): Promise<void> {
  if (process.argv.includes('--count')) countCalls();
  const sctp: typeof Sctp = await import(impl);
  const udpIo = (arg('--udp-io-child') ?? 'node') as 'node' | 'helper';
  const udpHelper = {
    gso: !process.argv.includes('--no-gso'),
    gro: !process.argv.includes('--no-gro'),
  };
  const engine = sctp.createUserspaceSctpEngine(
    udpIo === 'helper' ? { udpIo, udpHelper } : {},
  ) as Sctp.UserspaceSctpEngine;
  helperPid = () => engine.udpHelperPid;
  let counts = { messages: 0, bytes: 0 };
  const associations: Sctp.SctpAssociation[] = [];
  const packets = (): { in: number; out: number } => {
    let i = 0;
    let o = 0;
    for (const a of associations) {
      i += a.counters.packetsIn;
      o += a.counters.packetsOut;
    }
    return { in: i, out: o };
  };
  const handlers: Record<string, (...a: never[]) => Promise<unknown>> = {
    async sink() {
      const address = `127.212.${octet()}.${octet()}`;
      const encapsulationPort = randomPort();
      const l = await engine.listen({ address, port: 5000, encapsulationPort });
      l.on('association', (a) => {
        associations.push(a);
        a.on('message', (m) => {
          counts.messages++;
          counts.bytes += m.data.length;
        });
      });
      return { address, port: 5000, encapsulationPort };
    },
    async proxy(sink: Target) {
      const address = `127.213.${octet()}.${octet()}`;
      const encapsulationPort = randomPort();
      const l = await engine.listen({
        address,
        port: 5100,
        encapsulationPort,
        association: PROXY_ASSOCIATION,
      });
      l.on('association', (c) => {
        c.pause();
        void engine
          .connect({
            ...sink,
            association: PROXY_ASSOCIATION,
            // As the proxy socket does by default; SCTP_COST_SHARED=1 for the shared socket.
            connectedSocket: process.env.SCTP_COST_SHARED !== '1',
          })
          .then((e) => {
            associations.push(c, e);
            sctp.relayAssociations(c, e);
            c.resume();
          })
          .catch(() => c.abort('no endpoint'));
      });
      return { address, port: 5100, encapsulationPort };
    },
    async load(target: Target, size: number, messages: number) {
      const a = await engine.connect({ ...target, localAddress: '127.0.0.1' });
      associations.push(a);
      const data = Buffer.alloc(size, 0x5a);
      for (let i = 0; i < messages; i++) {
        if (!a.send({ data })) await new Promise<void>((r) => a.once('drain', () => r()));
      }
      while (a.bufferedAmount > 0) await new Promise((r) => setTimeout(r, 1));
      return true;
    },
    async counts() {
      return counts;
    },
    async reset() {
      counts = { messages: 0, bytes: 0 };
      return cpuMs();
    },
    async cpu() {
      return cpuMs();
    },
    async calls() {
      return { ...calls };
    },
    async sys() {
      return process.cpuUsage().system / 1000;
    },
    async helperCpu() {
      return helperCpuMs();
    },
    async helperCounters() {
      return engine.udpHelperCounters ?? {};
    },
    async packets() {
      return packets();
    },
    async stop() {
      await engine.close();
      setImmediate(() => process.disconnect?.());
      return true;
    },
  };
  process.on('message', async (msg: { id: number; method: string; args: never[] }) => {
    try {
      const value = await (handlers[msg.method] as (...a: never[]) => Promise<unknown>)(
        ...msg.args,
      );
      process.send?.({ id: msg.id, ok: true, value });
    } catch (err) {
      process.send?.({ id: msg.id, ok: false, error: String(err) });
    }
  });
}

function spawnRole(
  role: string,
  impl: string,
  prof: string | undefined,
  count: boolean,
  udpIo: string,
) {
  const self = fileURLToPath(import.meta.url);
  const argv = ['--child', role, '--impl-path', impl, '--udp-io-child', udpIo];
  const helperFlags = ['--no-gso', '--no-gro'].filter((f) => process.argv.includes(f));
  const sizes = ['--window', '--hwm'].flatMap((f) => {
    const v = arg(f);
    return v === undefined ? [] : [f, v];
  });
  const cp = fork(self, [...argv, ...helperFlags, ...sizes, ...(count ? ['--count'] : [])], {
    execArgv: [...process.execArgv, ...(prof ? ['--cpu-prof', `--cpu-prof-dir=${prof}`] : [])],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let next = 1;
  const waiting = new Map<number, (m: { ok: boolean; value?: unknown; error?: string }) => void>();
  cp.on('message', (m: { id: number; ok: boolean; value?: unknown; error?: string }) => {
    waiting.get(m.id)?.(m);
    waiting.delete(m.id);
  });
  return {
    call<T>(method: string, ...args: unknown[]): Promise<T> {
      const id = next++;
      return new Promise<T>((res, rej) => {
        waiting.set(id, (m) => (m.ok ? res(m.value as T) : rej(new Error(m.error))));
        cp.send({ id, method, args });
      });
    },
    kill: () => cp.kill('SIGKILL'),
    exited: new Promise((r) => cp.once('exit', r)),
  };
}

async function main(): Promise<void> {
  const size = Number(arg('--size') ?? 65536);
  const direct = process.argv.includes('--direct');
  const prof = arg('--prof');
  const implDir = arg('--impl');
  // A directory of sources (index.ts), or a module itself (a build's dist/index.js).
  const impl = implDir
    ? resolve(implDir, /\.[cm]?[jt]s$/.test(implDir) ? '' : 'index.ts')
    : fileURLToPath(new URL('../index.ts', import.meta.url));
  const messages = Number(
    arg('--messages') ?? Math.ceil((Number(arg('--mb') ?? 200) * 1e6) / size),
  );
  const count = process.argv.includes('--count');
  const io = arg('--udp-io') ?? 'node';
  const proxyIo = arg('--proxy-udp-io') ?? io;
  const sink = spawnRole('sink', impl, direct ? prof : undefined, count, io);
  const proxy = direct ? undefined : spawnRole('proxy', impl, prof, count, proxyIo);
  const load = spawnRole('load', impl, undefined, count, io);
  try {
    const sinkTarget = await sink.call<Target>('sink');
    const target = proxy ? await proxy.call<Target>('proxy', sinkTarget) : sinkTarget;
    // A short warm-up (JIT, windows), then the measured run.
    await load.call('load', target, size, Math.min(2000, Math.ceil(messages / 20)));
    await new Promise((r) => setTimeout(r, 200));
    const p0 = await (proxy ?? sink).call<{ in: number; out: number }>('packets');
    const c0 = await Promise.all([
      sink.call<number>('reset'),
      proxy?.call<number>('cpu'),
      load.call<number>('cpu'),
    ]);
    const sys0 = await (proxy ?? sink).call<number>('sys');
    const h0 = await (proxy ?? sink).call<number>('helperCpu');
    const calls0 = await (proxy ?? sink).call<Record<string, number>>('calls');
    const hc0 = await (proxy ?? sink).call<Record<string, number>>('helperCounters');
    const t0 = performance.now();
    await load.call('load', target, size, messages);
    let got = await sink.call<{ messages: number; bytes: number }>('counts');
    const deadline = performance.now() + 30_000;
    while (got.messages < messages && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 5));
      got = await sink.call<{ messages: number; bytes: number }>('counts');
    }
    const seconds = (performance.now() - t0) / 1000;
    const c1 = await Promise.all([
      sink.call<number>('cpu'),
      proxy?.call<number>('cpu'),
      load.call<number>('cpu'),
    ]);
    const [sinkMs, proxyMs, loadMs] = c1.map((v, i) => (v ?? 0) - (c0[i] ?? 0)) as [
      number,
      number,
      number,
    ];
    const p1 = await (proxy ?? sink).call<{ in: number; out: number }>('packets');
    const sysMs = (await (proxy ?? sink).call<number>('sys')) - sys0;
    const helperMs = (await (proxy ?? sink).call<number>('helperCpu')) - h0;
    const calls1 = await (proxy ?? sink).call<Record<string, number>>('calls');
    const hc1 = await (proxy ?? sink).call<Record<string, number>>('helperCounters');
    const mb = got.bytes / 1e6;
    const per = (ms: number): string =>
      size >= 1000
        ? `${(ms / mb).toFixed(2)} ms/MB`
        : `${((1000 * ms) / got.messages).toFixed(2)} µs/msg`;
    const rate =
      size >= 1000
        ? `${(mb / seconds).toFixed(1)} MB/s`
        : `${Math.round(got.messages / seconds)} msg/s`;
    console.log(
      `${direct ? 'direct' : 'proxy'} ${size} B × ${got.messages}/${messages} in ${seconds.toFixed(2)} s: ${rate}; ` +
        `CPU ${proxy ? `proxy ${per(proxyMs)}, ` : ''}sink ${per(sinkMs)}, load ${per(loadMs)}` +
        ` (${proxy ? 'proxy' : 'sink'} system ${Math.round((100 * sysMs) / (proxy ? proxyMs : sinkMs))} %` +
        `${helperMs > 0 ? `, of which its UDP helper ${per(helperMs)}` : ''}; udpIo ${proxy ? proxyIo : io})` +
        `; ${proxy ? 'proxy' : 'sink'} packets in ${((p1.in - p0.in) / got.messages).toFixed(3)}, out ${((p1.out - p0.out) / got.messages).toFixed(3)} per message` +
        ` (load average ${(await import('node:os')).loadavg()[0]?.toFixed(1)})`,
    );
    if (hc1.packetsOut !== undefined) {
      const d = (k: string): number => (hc1[k] ?? 0) - (hc0[k] ?? 0);
      console.log(
        `${proxy ? 'proxy' : 'sink'} UDP helper: ${d('packetsOut')} datagrams out, ${d('gsoSegments')} of them ` +
          `in ${d('gsoSends')} GSO sends (${d('gsoRefused')} refused); ${d('packetsIn')} in, ` +
          `${d('groSegments')} of them in ${d('groReads')} GRO reads`,
      );
    }
    if (count) {
      const per = size >= 1000 ? mb : got.messages;
      const unit = size >= 1000 ? 'per MB' : 'per message';
      const list = Object.keys(calls1)
        .map((k) => `${k} ${(((calls1[k] ?? 0) - (calls0[k] ?? 0)) / per).toFixed(2)}`)
        .join(', ');
      console.log(`${proxy ? 'proxy' : 'sink'} calls ${unit}: ${list}`);
    }
    await Promise.all([sink.call('stop'), proxy?.call('stop'), load.call('stop')]);
    await Promise.race([
      Promise.all([sink.exited, proxy?.exited, load.exited]),
      new Promise((r) => setTimeout(r, 10_000)),
    ]);
  } finally {
    sink.kill();
    proxy?.kill();
    load.kill();
  }
}

if (process.argv.includes('--child')) {
  await child(arg('--impl-path') as string);
} else {
  await main();
}
