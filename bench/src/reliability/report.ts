import type { SoakResult } from './run.js';
import type { ProbeResult } from './types.js';

/**
 * docs/reliability.md from a soak run: a summary table of every goal, then per fault what was done,
 * each figure beside its goal, and notes. A missed goal is written as such ("**no**"), with what was
 * measured; nothing is rounded into a pass.
 */

function cell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

function verdict(pass: boolean | undefined): string {
  return pass === undefined ? '' : pass ? 'yes' : '**no**';
}

/** Whether every goal of the probe was met (and it ran). */
export function probePassed(p: ProbeResult): boolean {
  return !p.error && p.figures.length > 0 && p.figures.every((f) => f.pass !== false);
}

function section(p: ProbeResult): string {
  const lines = [`## ${p.title}`, ''];
  if (p.done) lines.push(`**What was done.** ${p.done}`, '');
  if (p.figures.length > 0) {
    lines.push('| figure | this run | goal | met |', '| --- | --- | --- | --- |');
    for (const f of p.figures) {
      lines.push(`| ${cell(f.name)} | ${cell(f.value)} | ${cell(f.goal)} | ${verdict(f.pass)} |`);
    }
    lines.push('');
  }
  if (p.error)
    lines.push('**The probe failed to run:**', '', '```text', p.error.slice(0, 3000), '```', '');
  for (const n of p.notes) lines.push(`- ${n.replace(/\n/g, ' ')}`);
  if (p.notes.length > 0) lines.push('');
  lines.push(`_${p.seconds.toFixed(0)} s._`, '');
  return lines.join('\n');
}

/** The whole document. */
export function reliabilityMarkdown(r: SoakResult): string {
  const i = r.info;
  const load = (l: number[]) => l.map((x) => x.toFixed(2)).join(', ');
  const passed = r.probes.filter(probePassed).length;
  const out = [
    '# Reliability',
    '',
    "What the daemon does on an operator's worst day, measured by `pnpm soak` (the long versions of",
    'the probes of issue 12; their fast versions run in `pnpm test`). Every probe runs the real',
    '`userspace-proxy` bin, built with `tsc -b`, started with a configuration file and a services file',
    'as users run it, and looks at it only from outside: sockets, the services file, its metrics',
    'server and /proc. The figures are counts and bounds, not speeds, so a loaded machine does not',
    'change them much; the load average is stated below anyway. Regenerate this file with',
    '`npx -y pnpm@12.4.2 soak` (about 20 minutes; `--quick` for a check of a few minutes that does not',
    'write it, `--only churn,fuzz` for some probes, `--seed N` to replay a fuzz run).',
    '',
    '| | |',
    '| --- | --- |',
    `| run | ${i.kind}, ${i.startedAt} to ${i.finishedAt} |`,
    `| machine | ${cell(i.host)}, ${cell(i.cpus)}, ${i.memoryGiB} GiB, Node ${i.node} |`,
    `| load average (1, 5, 15 min) | before ${load(i.loadBefore)}; after ${load(i.loadAfter)} |`,
    `| descriptor limit of the run | ${i.nofile} |`,
    `| fuzz seed | ${i.seed} |`,
    `| goals met | ${passed} of ${r.probes.length} probes |`,
    '',
    '## Summary',
    '',
    '| fault | figure | this run | goal | met |',
    '| --- | --- | --- | --- | --- |',
  ];
  for (const p of r.probes) {
    const goals = p.figures.filter((f) => f.pass !== undefined);
    if (p.error) out.push(`| ${cell(p.title)} | the probe failed to run | | | **no** |`);
    for (const f of goals) {
      out.push(
        `| ${cell(p.title)} | ${cell(f.name)} | ${cell(f.value)} | ${cell(f.goal)} | ${verdict(f.pass)} |`,
      );
    }
  }
  out.push('');
  for (const p of r.probes) out.push(section(p));
  return `${out.join('\n').trimEnd()}\n`;
}
