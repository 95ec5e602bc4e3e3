import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { svgChart } from './chart.js';
import type { PeerId } from './configs.js';
import { replaceSection } from './docs-section.js';
import { GROUPS, type PeersResult } from './model.js';
import { summarize } from './pairing.js';
import { markdown } from './report.js';
import { type PeersOptions, runPeers } from './run.js';

/** `pnpm bench --peers --help`. */
export const PEERS_HELP = `usage: pnpm bench --peers [--reps N] [--quick] [--write] [--only GROUPS] [--subjects PEERS]
  Runs iperf3, wrk and sockperf through HAProxy, nginx stream, a naive Node relay and the
  userspace-proxy daemon (the built packages/server/dist/main.js with a config file), interleaved
  and paired with direct per repetition, on a random 127.x.y.0/24. See docs/benchmarks.md.
  --reps N          repetitions (default 3, 1 with --quick); figures are medians of the
                    per-repetition ratios
  --quick           1 s per measurement and a small idle test: a smoke run of about a minute
  --write           write the table into docs/benchmarks.md (between <!-- peers:start/end -->)
                    and the chart into docs/benchmarks-peers.svg
  --note TEXT       a sentence printed (and written) with the table, e.g. about the machine
  --json FILE       also write the raw result (every repetition's figures) to FILE
  --render FILE     do not run: print (and with --write, write) the table and chart of a
                    result that --json saved
  --only GROUPS     comma-separated: ${GROUPS.join(',')}
  --subjects PEERS  comma-separated: haproxy,nginx,naive,daemon,daemon2,native (direct always
                    runs; daemon runs --workers 1, daemon2 --workers 2, native --data-path native)
  --daemon-arg ARG  an extra daemon flag after --config FILE (repeatable)
  --daemon-node-arg ARG
                    a flag for the daemon's node, before its script, e.g. --optimize-for-size
                    (repeatable; node:cluster workers inherit it)
  --no-install      do not apt-get install missing tools (they are skipped)
  --no-build        do not build the packages first (tsc -b tsconfig.build.json)`;

/** A command line the peers benchmark cannot run with. */
export class PeersUsageError extends Error {
  /** Stable for the CLI's exit path. */
  readonly code = 'ERR_BENCH_USAGE';

  constructor(message: string) {
    super(`${message}\n\n${PEERS_HELP}`);
    this.name = 'PeersUsageError';
  }
}

const PEERS: readonly PeerId[] = ['haproxy', 'nginx', 'naive', 'daemon', 'daemon2', 'native'];

/** What the command line asks for, besides the options {@link runPeers} takes. */
export interface PeersArgs {
  run: Omit<PeersOptions, 'log' | 'daemonMain'>;
  write: boolean;
  build: boolean;
  note: string;
  help: boolean;
  /** `--json FILE`: the raw result (every repetition's figure) is written there. */
  json: string;
  /** `--render FILE`: no run; the table and chart are made from a result `--json` wrote. */
  render: string;
}

/** Parses the arguments after `pnpm bench` (with `--peers` among them); refuses what it does not know. */
export function parsePeersArgs(argv: readonly string[]): PeersArgs {
  const out: PeersArgs = {
    run: {
      reps: 3,
      quick: false,
      only: [],
      peers: [],
      install: true,
      daemonArgs: [],
      daemonNodeArgs: [],
    },
    write: false,
    build: true,
    note: '',
    help: false,
    json: '',
    render: '',
  };
  const value = (i: number, flag: string): string => {
    const v = argv[i + 1];
    if (v === undefined) throw new PeersUsageError(`${flag} needs a value`);
    return v;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a === '--peers') continue;
    else if (a === '--help' || a === '-h') out.help = true;
    else if (a === '--quick') out.run.quick = true;
    else if (a === '--write') out.write = true;
    else if (a === '--no-install') out.run.install = false;
    else if (a === '--no-build') out.build = false;
    else if (a === '--reps') {
      const n = Number(value(i++, a));
      if (!Number.isInteger(n) || n < 1 || n > 50)
        throw new PeersUsageError('--reps needs a whole number from 1 to 50');
      out.run.reps = n;
    } else if (a === '--note') out.note = value(i++, a);
    else if (a === '--json') out.json = value(i++, a);
    else if (a === '--render') out.render = value(i++, a);
    else if (a === '--daemon-arg') out.run.daemonArgs.push(value(i++, a));
    else if (a === '--daemon-node-arg') out.run.daemonNodeArgs.push(value(i++, a));
    else if (a === '--only') {
      out.run.only = listOf(value(i++, a), GROUPS, a);
    } else if (a === '--subjects') {
      out.run.peers = listOf(value(i++, a), PEERS, a);
    } else throw new PeersUsageError(`unknown argument ${JSON.stringify(a.slice(0, 60))}`);
  }
  if (out.run.quick && !argv.includes('--reps')) out.run.reps = 1;
  return out;
}

function listOf<T extends string>(text: string, allowed: readonly T[], flag: string): T[] {
  const items = text.split(',').filter(Boolean);
  const bad = items.filter((x) => !allowed.includes(x as T));
  if (bad.length || items.length === 0) {
    throw new PeersUsageError(
      `${flag}: ${JSON.stringify(bad.join(',').slice(0, 60))} is not one of ${allowed.join(',')}`,
    );
  }
  return items as T[];
}

const root = fileURLToPath(new URL('../../../', import.meta.url));

/** The heading the peers block goes under when docs/benchmarks.md has no markers yet. */
export const PEERS_HEADING = '## The peers, with standard tools: latest run';

/** The Markdown block `--write` puts between the markers (table, note, chart link). */
export function peersBlock(result: PeersResult, note: string): string {
  const summary = summarize(result);
  const md = markdown(result, summary);
  return `${note ? `${note}\n\n` : ''}${md}\n\n![Ratios to direct, per measure and subject](benchmarks-peers.svg)`;
}

/** Writes the block into docs/benchmarks.md and the chart next to it. */
function writeDocs(result: PeersResult, note: string): void {
  const file = `${root}docs/benchmarks.md`;
  const text = existsSync(file) ? readFileSync(file, 'utf8') : '# Benchmarks\n';
  writeFileSync(file, replaceSection(text, peersBlock(result, note), PEERS_HEADING));
  writeFileSync(`${root}docs/benchmarks-peers.svg`, `${svgChart(result)}\n`);
}

/** Builds every package, so the daemon that runs is the one users run. */
function build(): void {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  execFileSync(process.execPath, [tsc, '-b', `${root}tsconfig.build.json`], { stdio: 'inherit' });
}

/** `pnpm bench --peers …`: parse, build, run, print, and with `--write` write the docs. */
export async function peersMain(argv: readonly string[]): Promise<void> {
  let args: PeersArgs;
  try {
    args = parsePeersArgs(argv);
  } catch (err) {
    if (!(err instanceof PeersUsageError)) throw err;
    console.error(err.message);
    process.exitCode = 2;
    return;
  }
  if (args.help) return void console.log(PEERS_HELP);
  const log = (s: string) => console.error(`[peers] ${s}`);
  let result: PeersResult;
  if (args.render) {
    result = JSON.parse(readFileSync(args.render, 'utf8')) as PeersResult;
  } else {
    const daemonMain = `${root}packages/server/dist/main.js`;
    if (args.build) {
      log('building the packages (tsc -b tsconfig.build.json) …');
      build();
    }
    if (!existsSync(daemonMain)) {
      log(`${daemonMain} is missing (build first): the daemon will be skipped`);
    }
    result = await runPeers({ ...args.run, daemonMain, log });
    if (args.json) writeFileSync(args.json, `${JSON.stringify(result, null, 1)}\n`);
  }
  console.log(peersBlock(result, args.note).replace(/\n\n!\[[^\n]*$/, ''));
  if (args.write) {
    writeDocs(result, args.note);
    log('wrote docs/benchmarks.md (peers section) and docs/benchmarks-peers.svg');
  }
}
