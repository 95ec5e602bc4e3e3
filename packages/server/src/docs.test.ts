import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { exportedNames } from '../../core/src/test-support/export-lists.js';
import { buildProgram } from './cli.js';
import { defaultConfiguration } from './config-schema.js';
import { ProxyMetrics } from './metrics.js';
import { REPO_ROOT } from './test-support/daemon-process.js';

// docs/operations.md is the operator's reference: every flag, configuration field, endpoint and
// metric the code has must be in it, so that adding one without documenting it fails here.
const read = (path: string) => readFile(`${REPO_ROOT}${path}`, 'utf8');

/** Every leaf of a plain object as a dotted path ("iptables.syncPeriod"); arrays are leaves. */
function leafPaths(value: unknown, prefix = ''): string[] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return [prefix];
  const entries = Object.entries(value);
  if (entries.length === 0) return [prefix];
  return entries.flatMap(([key, child]) => leafPaths(child, prefix ? `${prefix}.${key}` : key));
}

describe('docs/operations.md', () => {
  it('documents every flag', async () => {
    const docs = await read('docs/operations.md');
    const flags = buildProgram().options.map((o) => o.long ?? o.short ?? '');
    expect(flags.length).toBeGreaterThan(20);
    expect(flags.filter((flag) => !docs.includes(`\`${flag}`))).toEqual([]);
    expect(docs).toContain('`-h`, `--help`');
  });

  it('documents every configuration field', async () => {
    const docs = await read('docs/operations.md');
    const { apiVersion: _a, kind: _k, ...config } = defaultConfiguration();
    const missing = leafPaths(config).filter((path) => {
      const [top] = path.split('.');
      const last = path.split('.').at(-1);
      // A field is documented by its path, by its section ("conntrack.*"), or, in the list of
      // accepted-and-ignored fields, as ".name" after its section's first field.
      return ![`\`${path}\``, `\`${top}.*\``, `\`.${last}\``].some((form) => docs.includes(form));
    });
    expect(missing).toEqual([]);
    expect(docs).toContain('`userspaceProxy.nodeWaitTimeout`');
  });

  it('documents every metric the daemon registers', async () => {
    const docs = await read('docs/operations.md');
    const names = new ProxyMetrics({ defaultMetrics: false }).registry
      .getMetricsAsArray()
      .map((m) => m.name);
    expect(names.length).toBeGreaterThan(15);
    expect(names.filter((name) => !docs.includes(`\`${name}\``))).toEqual([]);
    expect(docs).toContain('`process_*`, `nodejs_*`');
  });

  it('documents every HTTP path of the health and metrics servers', async () => {
    const docs = await read('docs/operations.md');
    const sources = (await read('packages/server/src/health-server.ts')).concat(
      await read('packages/server/src/metrics-server.ts'),
    );
    const paths = new Set([...sources.matchAll(/'(\/[a-zA-Z][a-zA-Z/.]*)'/g)].map((m) => m[1]));
    expect([...paths].sort()).toEqual([
      '/configz',
      '/healthz',
      '/healthz/ping',
      '/livez',
      '/metrics',
      '/proxyMode',
      '/status',
      '/status.json',
    ]);
    expect([...paths].filter((path) => !docs.includes(`\`${path}\``))).toEqual([]);
  });

  it('links the Kubernetes page and documents deploy/', async () => {
    const docs = await read('docs/operations.md');
    expect(docs).toContain('[kubernetes.md](kubernetes.md)');
    for (const file of ['serviceaccount.yaml', 'rbac.yaml', 'configmap.yaml', 'daemonset.yaml']) {
      expect(docs).toContain(`\`${file}\``);
    }
  });
});

describe('README.md', () => {
  it('starts with exactly the two commands of the quick start', async () => {
    const readme = await read('README.md');
    const quickStart = readme.split('## Quick start')[1]?.split('\n## ')[0] ?? '';
    const block = /```sh\n([\s\S]*?)```/.exec(quickStart)?.[1] ?? '';
    const commands = block
      .split('\n')
      .map((line) => line.replace(/#.*$/, '').trim())
      .filter(Boolean);
    expect(commands).toEqual(['npx -y pnpm@12.4.2 start', 'npx -y pnpm@12.4.2 test']);
  });
});

describe('docs/api.md', () => {
  // Core's entry points are listed name by name in core's public-surface test; the idler's and
  // SCTP's are checked here: each exported name is in the package's section, so a new export
  // without a line of documentation fails.
  it.each([
    ['idler', '## 7. `@userspace-proxy/idler`'],
    ['sctp', '## 8. `@userspace-proxy/sctp`'],
  ])('names every export of @userspace-proxy/%s in its section', async (pkg, heading) => {
    const docs = await read('docs/api.md');
    const section = docs.split(heading)[1]?.split('\n## ')[0] ?? '';
    expect(section).not.toBe('');
    const names = exportedNames(`${REPO_ROOT}packages/${pkg}/src/index.ts`);
    expect(names.length).toBeGreaterThan(10);
    expect(names.filter((name) => !section.includes(`\`${name}`))).toEqual([]);
    // The count in the table of entry points at the top of the page.
    const row = docs.split('\n').find((line) => line.startsWith(`| [\`@userspace-proxy/${pkg}\`]`));
    expect(row?.trim().endsWith(`| ${new Set(names).size} |`)).toBe(true);
  });
});
