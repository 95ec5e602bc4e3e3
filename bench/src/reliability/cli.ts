import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { REPO_ROOT } from './daemon.js';
import { probePassed, reliabilityMarkdown } from './report.js';
import { PROBES, runSoak } from './run.js';
import { FULL, QUICK, SMOKE, type SoakSizes } from './types.js';

const HELP = `usage: pnpm soak (or pnpm bench --only reliability) [--quick | --smoke] [--only ${PROBES.map(([id]) => id).join(',')}]
                 [--seed N] [--out FILE] [--no-write] [--sources]
  (default)  the goals' sizes, about 20 minutes; writes docs/reliability.md
  --quick    about 2 minutes; prints the document, writes it only with --out
  --smoke    a few seconds per probe (what pnpm test runs)
  --only     run only these probes (the document then holds only them)
  --seed N   the fuzz seed (default: random, printed)
  --out FILE write the document there instead of docs/reliability.md
  --no-write print only
  --sources  run the daemon from its TypeScript sources through tsx instead of building it`;

function arg(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

/** `tsc -b tsconfig.build.json`: the probes run the bin users run. */
function build(): void {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  execFileSync(process.execPath, [tsc, '-b', join(REPO_ROOT, 'tsconfig.build.json')], {
    stdio: 'inherit',
  });
}

/**
 * `pnpm soak` (and `pnpm bench --only reliability`): runs the probes, prints the document and writes
 * it; resolves with the exit code (1 when a goal was missed).
 */
export async function soakMain(argv: string[]): Promise<number> {
  if (argv.includes('--help')) {
    console.log(HELP);
    return 0;
  }
  const sizes: SoakSizes = argv.includes('--smoke')
    ? SMOKE
    : argv.includes('--quick')
      ? QUICK
      : FULL;
  const only = (arg(argv, '--only') ?? '').split(',').filter(Boolean);
  const unknown = only.filter((id) => !PROBES.some(([p]) => p === id));
  if (unknown.length > 0) throw new Error(`unknown probe(s): ${unknown.join(', ')}`);
  const seedArg = arg(argv, '--seed');
  const seed = seedArg === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(seedArg);
  if (!Number.isInteger(seed)) throw new Error('--seed needs an integer');
  const sources = argv.includes('--sources');
  if (!sources) build();
  console.error(`soak: ${sizes.kind} run, fuzz seed ${seed}`);
  const result = await runSoak(
    { sizes, build: sources ? 'sources' : 'built', seed, log: (l) => console.error(l) },
    only,
  );
  const md = reliabilityMarkdown(result);
  console.log(md);
  const out = arg(argv, '--out') ?? (sizes === FULL ? join(REPO_ROOT, 'docs/reliability.md') : '');
  if (out && !argv.includes('--no-write')) {
    writeFileSync(out, md);
    console.error(`soak: wrote ${out}`);
  }
  const failed = result.probes.filter((p) => !probePassed(p)).map((p) => p.id);
  console.error(
    failed.length ? `soak: goals missed: ${failed.join(', ')}` : 'soak: every goal met',
  );
  return failed.length ? 1 : 0;
}
