import { Command, CommanderError } from 'commander';
import type { StatusModel, StatusServicePort } from './status-model.js';

/**
 * `userspace-proxy status [--json] [--metrics-address host:port]`: fetches `/status.json` from a
 * running daemon's metrics server and prints it as a table (or as the JSON). A subcommand of its
 * own, dispatched by run.ts before the daemon's flags are parsed, because it shares none of them.
 */

/** Where the daemon's metrics server listens by default (kube-proxy's `metricsBindAddress`). */
export const DEFAULT_STATUS_ADDRESS = '127.0.0.1:10249';

/** How long `status` waits for the daemon. */
export const STATUS_FETCH_TIMEOUT_MS = 5000;

/** Output sinks of {@link runStatusCommand}. */
export interface StatusIO {
  stdout(text: string): void;
  stderr(text: string): void;
}

const bytes = (n: number): string => {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
};

/** Control characters out of a cell: the terminal shows text, never escape sequences from input. */
const cell = (s: string): string =>
  Array.from(s, (ch) => {
    const c = ch.codePointAt(0) ?? 0;
    return c < 0x20 || (c >= 0x7f && c < 0xa0) ? '?' : ch;
  }).join('');

function row(p: StatusServicePort): string[] {
  const portals = p.portals.map((x) => `${x.ip === '' ? '*' : x.ip}:${x.port}`).join(',') || '-';
  const endpoints = p.endpoints === null ? '?' : p.endpoints.join(',') || 'none';
  const refused =
    Object.entries(p.refused)
      .map(([k, v]) => `${k}=${v}`)
      .join(',') || '-';
  return [
    p.key,
    `${p.protocol}/${p.servicePort}`,
    portals,
    endpoints,
    p.ejected === null ? 'n/a' : p.ejected.join(',') || '-',
    String(p.connectionsActive),
    String(p.connectionsTotal),
    bytes(p.bytesIn),
    bytes(p.bytesOut),
    String(p.udpSessionsActive),
    p.heldConnections === null ? 'off' : String(p.heldConnections),
    refused,
  ].map(cell);
}

/** Renders the model as the terminal table `status` prints. */
export function formatStatusTable(model: StatusModel): string {
  const head = [
    'SERVICE PORT',
    'PROTO',
    'PORTALS',
    'ENDPOINTS',
    'EJECTED',
    'ACTIVE',
    'TOTAL',
    'IN',
    'OUT',
    'UDP',
    'HELD',
    'REFUSED',
  ];
  const rows = [head, ...model.servicePorts.map(row)];
  const widths = head.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  const lines = rows.map((r) =>
    r
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd(),
  );
  const s = model.sync;
  const sync =
    s.lastTimestampSeconds === null
      ? 'no sync yet'
      : `last sync ${new Date(s.lastTimestampSeconds * 1000).toISOString()}${
          s.lastDurationSeconds === null ? '' : ` (${(s.lastDurationSeconds * 1000).toFixed(1)} ms)`
        }`;
  const out = [cell(`userspace-proxy ${model.version}, mode ${model.proxyMode}, ${sync}`)];
  if (model.workers !== undefined && model.workers.length > 0) {
    const each = model.workers.map(
      (w) =>
        `${w.worker} pid ${w.pid} (${w.connectionsActive} active, ${w.connectionsTotal} total)`,
    );
    out.push(cell(`workers: ${each.join('; ')}`));
  }
  out.push(...lines);
  if (model.recentErrors.length > 0) {
    out.push('', 'RECENT ERRORS');
    for (const e of model.recentErrors.slice(0, 10)) {
      out.push(cell(`${e.time} ${e.kind} ${e.service}: ${e.message}`));
    }
  }
  return `${out.join('\n')}\n`;
}

/** Runs `status` with its arguments (after the word "status"); resolves with the exit code. */
export async function runStatusCommand(
  argv: readonly string[],
  io: StatusIO,
  fetchImpl: typeof fetch = fetch,
): Promise<number> {
  const program = new Command('userspace-proxy status')
    .description("Prints a running daemon's status (its /status.json) as a table.")
    .option('--json', 'Print the JSON document instead of a table.')
    .option(
      '--metrics-address <host:port>',
      `The daemon's metrics server (default ${DEFAULT_STATUS_ADDRESS}).`,
    )
    .helpOption('-h, --help', 'Show this help and quit.')
    .exitOverride()
    .configureOutput({ writeOut: io.stdout, writeErr: io.stderr });
  try {
    program.parse([...argv], { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 1;
    throw err;
  }
  const opts = program.opts<{ json?: boolean; metricsAddress?: string }>();
  const address = opts.metricsAddress ?? DEFAULT_STATUS_ADDRESS;
  const url = `http://${address}/status.json`;
  let text: string;
  try {
    const res = await fetchImpl(url, { signal: AbortSignal.timeout(STATUS_FETCH_TIMEOUT_MS) });
    text = await res.text();
    if (!res.ok) {
      io.stderr(
        `userspace-proxy status: ${url} answered ${res.status}: ${cell(text.slice(0, 200))}\n`,
      );
      return 1;
    }
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code;
    io.stderr(
      `userspace-proxy status: cannot reach the daemon at ${url} (${cause ?? (err as Error).message}); is it running, and is --metrics-address its --metrics-bind-address?\n`,
    );
    return 1;
  }
  if (opts.json) {
    io.stdout(text.endsWith('\n') ? text : `${text}\n`);
    return 0;
  }
  let model: StatusModel;
  try {
    model = JSON.parse(text) as StatusModel;
    if (!Array.isArray(model.servicePorts)) throw new Error('no servicePorts');
  } catch (err) {
    io.stderr(
      `userspace-proxy status: ${url} did not answer a status document: ${(err as Error).message}\n`,
    );
    return 1;
  }
  io.stdout(formatStatusTable(model));
  return 0;
}
