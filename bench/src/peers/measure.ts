import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { PORTS } from './configs.js';
import {
  escapeSnippet,
  parseIperfTcp,
  parseIperfUdp,
  parseSockperf,
  parseWrk,
  ToolOutputError,
} from './parse.js';
import { type Processes, type RunOutput, treeCpuSeconds, treeRss } from './processes.js';
import type { Toolbox } from './tools.js';

/** How long each measurement runs; `--quick` shortens all of them. */
export interface Durations {
  /** Seconds per iperf3, wrk and sockperf run (whole seconds: iperf3 and sockperf take no less). */
  seconds: number;
  /** The idle test: connections held first, then in total; the RSS growth between is divided. */
  idleFrom: number;
  idleTo: number;
  /** How long the proxy sits idle before its RSS is read. */
  idleSettleMs: number;
}

/** What every measurement needs. */
export interface Ctx {
  procs: Processes;
  box: Toolbox;
  dur: Durations;
}

/** A tool run that failed: the figure is missing for this repetition, with the reason. */
export class MeasurementError extends Error {
  /** Stable, so the runner can tell this from a bug in the harness. */
  readonly code = 'ERR_BENCH_MEASUREMENT';

  constructor(what: string, out: RunOutput) {
    const why = out.timedOut ? 'timed out' : `exit ${out.code}`;
    super(`${what}: ${why}; ${escapeSnippet(`${out.stderr}${out.stdout}`.trim())}`);
    this.name = 'MeasurementError';
  }
}

const bound = (d: Durations) => (d.seconds + 15) * 1000;

/**
 * Runs a tool and parses its output. One more try, after a second, for an iperf3 server still busy
 * with the previous test (it needs a moment after a UDP flood) and for a run that timed out (iperf3
 * 3.12 now and then never ends a UDP flood on a loaded machine).
 */
async function runParsed<T>(
  ctx: Ctx,
  what: string,
  cmd: string,
  args: string[],
  parse: (s: string) => T,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    const out = await ctx.procs.run(cmd, args, bound(ctx.dur));
    try {
      if (out.timedOut) throw new MeasurementError(what, out);
      return parse(out.stdout);
    } catch (err) {
      const busy = err instanceof ToolOutputError && /busy/.test(err.message);
      if (!(busy || out.timedOut) || attempt > 0) {
        throw err instanceof ToolOutputError ? new MeasurementError(what, out) : err;
      }
      await sleep(1000);
    }
  }
}

/** The CPU seconds `pid`'s tree spends while `work` runs (0 without a proxy process). */
async function withCpu<T>(pid: number | undefined, work: () => Promise<T>): Promise<[T, number]> {
  const before = pid ? treeCpuSeconds(pid) : 0;
  const value = await work();
  return [value, pid ? treeCpuSeconds(pid) - before : 0];
}

/** iperf3 TCP bulk: Gbit/s received, and the proxy's CPU-seconds per GB (10⁹ bytes) carried. */
export async function bulk(
  ctx: Ctx,
  address: string,
  streams: number,
  pid: number | undefined,
): Promise<{ gbps: number; cpuPerGB: number | null }> {
  const args = [
    '-c',
    address,
    '-p',
    `${PORTS.iperf}`,
    '-t',
    `${ctx.dur.seconds}`,
    '-P',
    `${streams}`,
    '-J',
  ];
  const [r, cpu] = await withCpu(pid, () =>
    runParsed(ctx, `iperf3 -P ${streams}`, ctx.box.paths.iperf3 as string, args, parseIperfTcp),
  );
  return { gbps: r.bitsPerSecond / 1e9, cpuPerGB: pid ? cpu / (r.bytes / 1e9) : null };
}

/** wrk with `Connection: close` against the nginx HTTP backend: new connections per second. */
export async function connRate(
  ctx: Ctx,
  address: string,
  concurrency: number,
  notes: string[],
  label: string,
): Promise<number> {
  const threads = Math.min(2, concurrency);
  const args = [
    `-t${threads}`,
    `-c${concurrency}`,
    `-d${ctx.dur.seconds}s`,
    '--timeout',
    '2s',
    '-H',
    'Connection: close',
    `http://${address}:${PORTS.http}/`,
  ];
  const r = await runParsed(
    ctx,
    `wrk -c${concurrency}`,
    ctx.box.paths.wrk as string,
    args,
    parseWrk,
  );
  if (r.errors > r.requests * 0.01) {
    notes.push(
      `${label}: wrk c=${concurrency} reported ${r.errors} errors for ${r.requests} requests.`,
    );
  }
  return r.requestsPerSecond;
}

/**
 * iperf3 UDP at `pps` datagrams/s (0: unlimited) of `size` bytes: delivered pps, loss %, and the
 * rate iperf3 managed to offer (on a busy machine the sender may fall short of a fixed rate). Both
 * iperf3 ends get 4 MiB socket buffers (`-w 4M`, capped by net.core.rmem_max): with the 208 KiB
 * default, iperf3's own receiver drops datagrams whenever it is descheduled for a few ms, and the
 * figure would be about iperf3, not about the proxy.
 */
export async function udp(
  ctx: Ctx,
  address: string,
  size: number,
  pps: number,
): Promise<{ deliveredPps: number; lostPercent: number; offeredPps: number }> {
  const rate = pps === 0 ? '0' : `${pps * size * 8}`;
  const args = [
    '-c',
    address,
    '-p',
    `${PORTS.iperf}`,
    '-u',
    '-b',
    rate,
    '-l',
    `${size}`,
    '-w',
    '4M',
  ];
  args.push('-t', `${ctx.dur.seconds}`, '-J');
  const r = await runParsed(
    ctx,
    `iperf3 -u -l ${size}`,
    ctx.box.paths.iperf3 as string,
    args,
    parseIperfUdp,
  );
  // The iperf3 server needs a moment after a UDP test before it takes the next one.
  await sleep(300);
  return {
    deliveredPps: r.deliveredPps,
    lostPercent: r.lostPercent,
    offeredPps: r.sentPackets / r.seconds,
  };
}

/** sockperf ping-pong, 64 B: the median half round trip in µs. */
export async function pingPong(ctx: Ctx, address: string, proto: 'tcp' | 'udp'): Promise<number> {
  const args = [
    'ping-pong',
    '-i',
    address,
    '-p',
    `${PORTS.sockperf}`,
    '-m',
    '64',
    '-t',
    `${ctx.dur.seconds}`,
  ];
  if (proto === 'tcp') args.push('--tcp');
  const r = await runParsed(
    ctx,
    `sockperf ${proto}`,
    ctx.box.paths.sockperf as string,
    args,
    parseSockperf,
  );
  return r.medianUs;
}

/**
 * The line protocol of helpers/idle-conns.mjs: one reader per helper for its whole life (a reader per
 * request would drop lines that arrive between two of them), requests answered in order.
 */
export class LineChannel {
  readonly #child: ChildProcess;
  readonly #lines: string[] = [];
  #waiter: (() => void) | undefined;

  constructor(child: ChildProcess) {
    this.#child = child;
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      this.#lines.push(line);
      this.#waiter?.();
    });
  }

  /** Sends `line` (none when empty) and waits for the next reply that starts with `expect`. */
  async ask(line: string, expect: string, timeoutMs: number): Promise<string> {
    if (line) this.#child.stdin?.write(`${line}\n`);
    const end = Date.now() + timeoutMs;
    for (;;) {
      const reply = this.#lines.shift();
      if (reply?.startsWith('error')) throw new Error(`idle helper: ${reply}`);
      if (reply?.startsWith(expect)) return reply;
      if (reply !== undefined) continue;
      const left = end - Date.now();
      if (left <= 0)
        throw new Error(`idle helper: no "${expect}" reply to "${line}" in ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.#waiter = undefined;
    }
  }
}

/** How many connections the holder behind the proxy has accepted (and still holds). */
async function held(holder: LineChannel): Promise<number> {
  const reply = await holder.ask('count', 'count', 5000);
  return Number(reply.split(' ')[1]);
}

async function waitHeld(
  holder: LineChannel,
  want: (n: number) => boolean,
  ms: number,
): Promise<number> {
  const end = Date.now() + ms;
  for (;;) {
    const n = await held(holder);
    if (want(n)) return n;
    if (Date.now() > end)
      throw new Error(`idle test: the holder has ${n} connections after ${ms} ms`);
    await sleep(100);
  }
}

/**
 * RSS per idle proxied connection, in KB (10³ bytes): open `idleFrom` connections through the proxy
 * (counted once the holder behind it has them all, so both legs exist), let it settle, read the
 * proxy tree's RSS; open up to `idleTo`, settle, read again; the growth divided by the connections
 * added. Taking the marginal cost above a first batch leaves out the buffers and code every proxy
 * warms up on its first connections.
 */
export async function idleRss(
  ctx: Ctx,
  address: string,
  pid: number,
  holder: LineChannel,
): Promise<number> {
  const { idleFrom, idleTo, idleSettleMs } = ctx.dur;
  const script = fileURLToPath(new URL('./helpers/idle-conns.mjs', import.meta.url));
  const child = ctx.procs.piped(process.execPath, [script, 'open', address, `${PORTS.idle}`]);
  const opener = new LineChannel(child);
  try {
    await opener.ask('', 'ready', 10_000);
    const base = await held(holder);
    await opener.ask(`open ${idleFrom}`, 'open', 60_000);
    await waitHeld(holder, (n) => n >= base + idleFrom, 30_000);
    await sleep(idleSettleMs);
    const rss1 = treeRss(pid);
    await opener.ask(`open ${idleTo}`, 'open', 120_000);
    await waitHeld(holder, (n) => n >= base + idleTo, 30_000);
    await sleep(idleSettleMs);
    const rss2 = treeRss(pid);
    return (rss2 - rss1) / (idleTo - idleFrom) / 1000;
  } finally {
    await opener.ask('close', 'closed', 30_000).catch(() => undefined);
    await ctx.procs.stop(child);
    await waitHeld(holder, (n) => n === 0, 30_000).catch(() => undefined);
  }
}
