import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { markdown, svgChart } from './report.js';
import { FULL, runSuite, SMOKE, type SuiteConfig } from './suite.js';

const HELP = `usage: pnpm bench [--smoke] [--reps N] [--only tcp,latency,udp,memory,sctp,sync,lb,idler] [--write]
  --smoke   a few seconds, to check the harness (what CI runs)
  --reps N  repetitions per scenario (default 5)
  --only    run only these groups
  --write   write the results into docs/benchmarks.md and docs/benchmarks.svg
  --profile DIR  the proxy host processes write V8 CPU profiles (.cpuprofile) into DIR
  --sources run the proxy from core's TypeScript sources through tsx instead of building
            packages/core first (tsx wraps every named function expression in __name(), which
            costs CPU and about 2.5 KB per proxied connection that the build does not)
  --only reliability  instead: the reliability soak (pnpm soak; pnpm bench --only reliability --help)
  --peers   instead: HAProxy, nginx, a naive relay and the daemon with iperf3, wrk and sockperf
            (pnpm bench --peers --help)`;

const START = '<!-- suite:start -->';
const END = '<!-- suite:end -->';

/** Replaces the suite's block in docs/benchmarks.md, keeping every other section as it is. */
function writeDocs(md: string, svg: string): void {
  const docs = fileURLToPath(new URL('../../docs/', import.meta.url));
  const file = `${docs}benchmarks.md`;
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    text = '# Benchmarks\n';
  }
  const block = `${START}\n${md}\n\n![ratios](benchmarks.svg)\n${END}`;
  const i = text.indexOf(START);
  const j = text.indexOf(END);
  text =
    i >= 0 && j > i
      ? text.slice(0, i) + block + text.slice(j + END.length)
      : `${text.trimEnd()}\n\n## Latest suite run\n\n${block}\n`;
  writeFileSync(file, text);
  writeFileSync(`${docs}benchmarks.svg`, `${svg}\n`);
}

/**
 * Builds @userspace-proxy/core, idler, sctp and native (tsc -b; their project references core's),
 * so the proxy hosts run what users run.
 */
function buildCore(): void {
  const require = createRequire(import.meta.url);
  const tsc = require.resolve('typescript/bin/tsc');
  const project = fileURLToPath(new URL('../../packages/idler/tsconfig.json', import.meta.url));
  execFileSync(process.execPath, [tsc, '-b', project], { stdio: 'inherit' });
  // The sctp group's processes import @userspace-proxy/sctp (its project references core's).
  const sctp = fileURLToPath(new URL('../../packages/sctp/tsconfig.json', import.meta.url));
  execFileSync(process.execPath, [tsc, '-b', sctp], { stdio: 'inherit' });
  // The idler group's native row imports @userspace-proxy/native.
  const native = fileURLToPath(new URL('../../packages/native/tsconfig.json', import.meta.url));
  execFileSync(process.execPath, [tsc, '-b', native], { stdio: 'inherit' });
}

async function main(argv: string[]): Promise<void> {
  if (argv.includes('--peers')) return (await import('./peers/cli.js')).peersMain(argv);
  if (argv[argv.indexOf('--only') + 1] === 'reliability' && argv.includes('--only')) {
    const rest = argv.filter((a, i) => a !== '--only' && argv[i - 1] !== '--only');
    process.exit(await (await import('./reliability/cli.js')).soakMain(rest));
  }
  if (argv.includes('--help')) return void console.log(HELP);
  const cfg: SuiteConfig = { ...(argv.includes('--smoke') ? SMOKE : FULL) };
  const reps = argv.indexOf('--reps');
  if (reps >= 0) cfg.reps = Number(argv[reps + 1]);
  const only = argv.indexOf('--only');
  if (only >= 0) cfg.only = (argv[only + 1] ?? '').split(',').filter(Boolean);
  if (!(cfg.reps >= 1)) throw new Error('--reps needs a positive number');
  const profile = argv.indexOf('--profile');
  if (profile >= 0) process.env.BENCH_PROFILE_DIR = argv[profile + 1] ?? '.';
  if (!argv.includes('--sources')) {
    buildCore();
    process.env.BENCH_BUILT = '1';
  }
  const result = await runSuite(cfg);
  const md = markdown(result);
  console.log(md);
  if (argv.includes('--write')) writeDocs(md, svgChart(result));
}

await main(process.argv.slice(2));
