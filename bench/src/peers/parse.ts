/**
 * Parsers for what iperf3, wrk and sockperf print. Kept apart from the code that runs the tools so
 * that the tests can prove them on captured outputs (fixtures/) without the tools installed.
 */

/** A tool's output could not be read: the figure is missing, never guessed. */
export class ToolOutputError extends Error {
  /** Stable, so the report can tell a parse failure from a tool that did not run. */
  readonly code = 'ERR_BENCH_TOOL_OUTPUT';

  constructor(tool: string, reason: string, output: string) {
    super(`${tool}: ${reason}; output began: ${escapeSnippet(output)}`);
    this.name = 'ToolOutputError';
  }
}

/** The first 200 characters of `text`, control characters escaped, for an error message. */
export function escapeSnippet(text: string, max = 200): string {
  const cut = text.length > max ? `${text.slice(0, max)}…` : text;
  return JSON.stringify(cut);
}

/** iperf3 TCP, receiver's view: what actually crossed the proxy. */
export interface IperfTcp {
  bitsPerSecond: number;
  bytes: number;
  seconds: number;
}

/** iperf3 UDP, receiver's view. */
export interface IperfUdp {
  /** Datagrams that arrived, per second of the test. */
  deliveredPps: number;
  sentPackets: number;
  lostPackets: number;
  lostPercent: number;
  seconds: number;
}

type Json = Record<string, unknown>;

function iperfJson(text: string): Json {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new ToolOutputError('iperf3', 'not JSON', text);
  }
  if (typeof doc !== 'object' || doc === null)
    throw new ToolOutputError('iperf3', 'not an object', text);
  const d = doc as Json;
  // iperf3 -J reports its own failures (refused connection, server busy) as {"error": "..."}.
  if (typeof d.error === 'string') throw new ToolOutputError('iperf3', d.error, text);
  if (typeof d.end !== 'object' || d.end === null)
    throw new ToolOutputError('iperf3', 'no "end"', text);
  return d.end as Json;
}

function num(o: unknown, key: string, tool: string, text: string): number {
  const v = typeof o === 'object' && o !== null ? (o as Json)[key] : undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    throw new ToolOutputError(tool, `no number "${key}"`, text);
  }
  return v;
}

/** `iperf3 -c … -J` (TCP): throughput and bytes as the receiver counted them (`end.sum_received`). */
export function parseIperfTcp(text: string): IperfTcp {
  const end = iperfJson(text);
  const r = end.sum_received;
  return {
    bitsPerSecond: num(r, 'bits_per_second', 'iperf3', text),
    bytes: num(r, 'bytes', 'iperf3', text),
    seconds: num(r, 'seconds', 'iperf3', text),
  };
}

/**
 * `iperf3 -c … -u -J`: datagrams delivered. iperf3 3.12 puts the server's count in
 * `end.sum_received` (older versions only in `end.sum`): `packets` is the highest sequence number
 * seen, `lost_packets` the gaps, so delivered = packets − lost.
 */
export function parseIperfUdp(text: string): IperfUdp {
  const end = iperfJson(text);
  const r = (end.sum_received ?? end.sum) as Json | undefined;
  const sent = (end.sum_sent ?? end.sum) as Json | undefined;
  const packets = num(r, 'packets', 'iperf3', text);
  const lost = num(r, 'lost_packets', 'iperf3', text);
  const seconds = num(r, 'seconds', 'iperf3', text);
  if (!(seconds > 0)) throw new ToolOutputError('iperf3', 'zero-length test', text);
  const sentPackets = num(sent, 'packets', 'iperf3', text);
  return {
    deliveredPps: Math.max(0, packets - lost) / seconds,
    sentPackets,
    lostPackets: lost,
    lostPercent: num(r, 'lost_percent', 'iperf3', text),
    seconds,
  };
}

/** wrk's summary. */
export interface WrkResult {
  requestsPerSecond: number;
  requests: number;
  /** Connect, read, write and timeout errors together, plus non-2xx/3xx responses. */
  errors: number;
}

/**
 * wrk's text summary (`Requests/sec:`, `Socket errors: …`, `Non-2xx or 3xx responses: …`). With
 * `Connection: close` every request is a new connection, so requests/s is new connections/s.
 */
export function parseWrk(text: string): WrkResult {
  const rps = /^Requests\/sec:\s+([\d.]+)/m.exec(text);
  const total = /^\s*(\d+) requests in /m.exec(text);
  if (!rps || !total) throw new ToolOutputError('wrk', 'no "Requests/sec"', text);
  let errors = 0;
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(text);
  if (sock) errors += sock.slice(1).reduce((a, b) => a + Number(b), 0);
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(text);
  if (non2xx) errors += Number(non2xx[1]);
  return { requestsPerSecond: Number(rps[1]), requests: Number(total[1]), errors };
}

/** sockperf ping-pong's statistics: half round trips in µs (sockperf reports RTT / 2). */
export interface SockperfResult {
  medianUs: number;
  avgUs: number;
  p99Us: number;
  observations: number;
}

/**
 * `sockperf ping-pong` output. The median (`percentile 50.000`) is the figure used: on a shared
 * machine the mean moves with every scheduling hiccup, the median much less. Colour escapes are
 * stripped first (sockperf prints them even into a pipe).
 */
export function parseSockperf(text: string): SockperfResult {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: sockperf's colour escapes
  const plain = text.replace(/\u001b\[[0-9;]*m/g, '');
  if (/No messages were received/.test(plain)) {
    throw new ToolOutputError('sockperf', 'no reply from the server', text);
  }
  const avg = /avg-latency=([\d.]+)/.exec(plain);
  const p50 = /percentile 50\.000 =\s+([\d.]+)/.exec(plain);
  const p99 = /percentile 99\.000 =\s+([\d.]+)/.exec(plain);
  const obs = /Total (\d+) observations/.exec(plain);
  if (!avg || !p50) throw new ToolOutputError('sockperf', 'no latency figures', text);
  return {
    medianUs: Number(p50[1]),
    avgUs: Number(avg[1]),
    p99Us: p99 ? Number(p99[1]) : Number.NaN,
    observations: obs ? Number(obs[1]) : 0,
  };
}

/** CPU ticks of one process from `/proc/PID/stat`: own (utime+stime) and reaped children's. */
export interface ProcStat {
  pid: number;
  ppid: number;
  ownTicks: number;
  childTicks: number;
}

/**
 * One line of `/proc/PID/stat`. The command name is in parentheses and may itself hold spaces and
 * parentheses, so the fields are counted from the last `)`.
 */
export function parseProcStat(line: string): ProcStat {
  const close = line.lastIndexOf(')');
  const pid = Number.parseInt(line, 10);
  if (close < 0 || !Number.isFinite(pid))
    throw new ToolOutputError('/proc', 'not a stat line', line);
  // After ") ": state(3) ppid(4) … utime(14) stime(15) cutime(16) cstime(17), 1-based as in proc(5).
  const f = line
    .slice(close + 2)
    .trim()
    .split(/\s+/);
  const at = (n: number) => Number(f[n - 3]);
  const ownTicks = at(14) + at(15);
  const childTicks = at(16) + at(17);
  if (!Number.isFinite(ownTicks) || !Number.isFinite(childTicks)) {
    throw new ToolOutputError('/proc', 'short stat line', line);
  }
  return { pid, ppid: at(4), ownTicks, childTicks };
}

/** `VmRSS` of `/proc/PID/status` in bytes (0 for a process without memory, e.g. a zombie). */
export function parseVmRss(status: string): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(status);
  return m ? Number(m[1]) * 1024 : 0;
}
