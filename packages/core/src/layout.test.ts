import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/**
 * The layout rules of issue 9, checked over every TypeScript file of the workspace (packages/*, examples/*
 * and bench), so that they hold after this issue too: no import cycles, and no source file over 400
 * lines without a reason written near its top. The import graph is read with TypeScript's
 * `preProcessFile` (a lexer, not a type check: the whole walk takes a few hundred milliseconds).
 */

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

/**
 * Import edges ("from -> to", repo-relative) allowed to close a cycle for now. Each entry names the
 * issue it waits for; the test fails once an entry no longer closes a cycle, so it cannot outlive it.
 */
const CYCLE_EDGES_ALLOWED = new Set<string>([]);

/** The most lines a non-test source file has without a reason near its top. */
const MAX_LINES = 400;
/** How far from the top the reason may stand (after the imports of a long file). */
const REASON_WITHIN_LINES = 40;
/** The words a reason contains, e.g. `// longer than 400 lines because the relay's two pumps ...`. */
const REASON = /longer than 400 lines because/i;

/**
 * Source files over {@link MAX_LINES} lines with no reason yet. The test fails once an entry is short
 * enough or has its reason, so the list only shrinks.
 */
const LONG_FILES_ALLOWED = new Set<string>([]);

/** Every .ts file under the src folders of the workspace (and bench/src, scripts), repo-relative. */
function sourceFiles(): string[] {
  const roots = ['packages', 'examples'].flatMap((parent) =>
    readdirSync(join(REPO, parent), { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => `${parent}/${entry.name}/src`),
  );
  roots.push('bench/src', 'scripts');
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(REPO, dir), { withFileTypes: true })) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory() && entry.name !== 'node_modules') walk(path);
      else if (entry.isFile() && entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) {
        files.push(path);
      }
    }
  };
  for (const root of roots) if (existsSync(join(REPO, root))) walk(root);
  return files.sort();
}

/**
 * Where a workspace package's entry points resolve with the `@userspace-proxy/source` condition, as
 * tsconfig.json's customConditions and vitest resolve them: "@userspace-proxy/core/sockets" →
 * "packages/core/src/sockets.ts". Cross-package edges make a cycle between packages visible too.
 */
function workspaceEntries(): Map<string, string> {
  const entries = new Map<string, string>();
  for (const dir of readdirSync(join(REPO, 'packages'))) {
    const manifest = join(REPO, 'packages', dir, 'package.json');
    if (!existsSync(manifest)) continue;
    const pkg = JSON.parse(readFileSync(manifest, 'utf8')) as {
      name?: string;
      exports?: Record<string, Record<string, string> | string>;
    };
    for (const [subpath, target] of Object.entries(pkg.exports ?? {})) {
      const source = typeof target === 'object' ? target['@userspace-proxy/source'] : undefined;
      if (pkg.name === undefined || source === undefined) continue;
      const specifier = subpath === '.' ? pkg.name : `${pkg.name}/${subpath.slice(2)}`;
      entries.set(specifier, posix.join('packages', dir, source));
    }
  }
  return entries;
}

interface Edge {
  to: string;
  /** 1-based line of the import, for the report. */
  line: number;
}

/**
 * The import graph: repo-relative file → the workspace files it imports statically. Type-only imports
 * count (a type cycle is still two files that cannot be understood apart); dynamic `import()` does not.
 */
function importGraph(files: readonly string[]): Map<string, Edge[]> {
  const known = new Set(files);
  const entries = workspaceEntries();
  const graph = new Map<string, Edge[]>();
  for (const file of files) {
    const text = readFileSync(join(REPO, file), 'utf8');
    const edges: Edge[] = [];
    for (const imported of ts.preProcessFile(text, true, false).importedFiles) {
      const specifier = imported.fileName;
      // `import('./x.js')` loads lazily, after both modules have run (bench's sync-cost role): not a
      // cycle of module evaluation, so it does not count.
      if (/\bimport\s*\(\s*$/.test(text.slice(Math.max(0, imported.pos - 40), imported.pos))) {
        continue;
      }
      let to: string | undefined;
      if (specifier.startsWith('.')) {
        to = posix.join(posix.dirname(file), specifier).replace(/\.js$/, '.ts');
      } else {
        to = entries.get(specifier);
      }
      if (to === undefined || !known.has(to)) continue;
      const line = text.slice(0, imported.pos).split('\n').length;
      edges.push({ to, line });
    }
    graph.set(file, edges);
  }
  return graph;
}

/** Strongly connected components with more than one file, or a file importing itself (Tarjan). */
function cycles(graph: ReadonlyMap<string, readonly Edge[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter);
    counter++;
    stack.push(v);
    onStack.add(v);
    for (const { to } of graph.get(v) ?? []) {
      if (!index.has(to)) {
        visit(to);
        low.set(v, Math.min(low.get(v) as number, low.get(to) as number));
      } else if (onStack.has(to)) {
        low.set(v, Math.min(low.get(v) as number, index.get(to) as number));
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      const selfImport = (graph.get(v) ?? []).some((edge) => edge.to === v);
      if (component.length > 1 || selfImport) found.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

/** One cycle through `component`, printed as the import lines that make it: "a.ts:3 -> b.ts". */
function describeCycle(graph: ReadonlyMap<string, readonly Edge[]>, component: string[]): string {
  const members = new Set(component);
  const start = component[0] as string;
  // Breadth-first from start back to start inside the component: the shortest cycle through it.
  const previous = new Map<string, { from: string; line: number }>();
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift() as string;
    for (const { to, line } of graph.get(v) ?? []) {
      if (!members.has(to) || previous.has(to)) continue;
      previous.set(to, { from: v, line });
      if (to === start) break;
      queue.push(to);
    }
    if (previous.has(start)) break;
  }
  const steps: string[] = [];
  let at = start;
  do {
    const step = previous.get(at) as { from: string; line: number };
    steps.unshift(`${step.from}:${step.line} -> ${at}`);
    at = step.from;
  } while (at !== start);
  return `cycle of ${component.length} file(s):\n    ${steps.join('\n    ')}`;
}

describe('workspace layout (issue 9)', () => {
  const files = sourceFiles();
  const graph = importGraph(files);

  it('finds the workspace sources and their imports', () => {
    expect(files).toContain('packages/core/src/index.ts');
    expect(graph.get('packages/core/src/ports/port-allocator-range.ts')).toContainEqual(
      expect.objectContaining({ to: 'packages/core/src/ports/port-allocator.ts' }),
    );
  });

  it('has no import cycles (type-only imports count)', () => {
    const allowed = new Map<string, Edge[]>();
    for (const [from, edges] of graph) {
      allowed.set(
        from,
        edges.filter(({ to }) => !CYCLE_EDGES_ALLOWED.has(`${from} -> ${to}`)),
      );
    }
    const problems = cycles(allowed).map((component) => describeCycle(allowed, component));
    expect(problems, problems.join('\n')).toEqual([]);
  });

  it('has no cycle between workspace folders either (dependencies point one way, toward core)', () => {
    // "packages/core", "examples/standalone", "bench": the folder a file belongs to.
    const folderOf = (file: string): string =>
      file.startsWith('bench/') ? 'bench' : file.split('/').slice(0, 2).join('/');
    const folders = new Map<string, Edge[]>();
    for (const [from, edges] of graph) {
      const list = folders.get(folderOf(from)) ?? [];
      for (const { to, line } of edges) {
        if (folderOf(to) !== folderOf(from)) list.push({ to: folderOf(to), line });
      }
      folders.set(folderOf(from), list);
    }
    const problems = cycles(folders).map((component) => component.join(' <-> '));
    expect(problems, problems.join('\n')).toEqual([]);
    expect(folders.get('packages/core')?.map((edge) => edge.to) ?? []).toEqual([]);
  });

  it('allows only cycle edges that still exist and still close a cycle', () => {
    const components = cycles(graph);
    const stale = [...CYCLE_EDGES_ALLOWED].filter((entry) => {
      const [from, to] = entry.split(' -> ') as [string, string];
      const exists = (graph.get(from) ?? []).some((edge) => edge.to === to);
      const closes = components.some((c) => c.includes(from) && c.includes(to));
      return !exists || !closes;
    });
    expect(stale, `remove from CYCLE_EDGES_ALLOWED: ${stale.join(', ')}`).toEqual([]);
  });

  it(`has no source file over ${MAX_LINES} lines without a reason near its top`, () => {
    const long: string[] = [];
    const stale: string[] = [];
    for (const file of files) {
      if (file.endsWith('.test.ts')) continue;
      const lines = readFileSync(join(REPO, file), 'utf8').split('\n');
      const count = lines.at(-1) === '' ? lines.length - 1 : lines.length;
      const reasoned = lines.slice(0, REASON_WITHIN_LINES).some((line) => REASON.test(line));
      const excused = count <= MAX_LINES || reasoned;
      if (LONG_FILES_ALLOWED.has(file)) {
        if (excused) stale.push(file);
      } else if (!excused) {
        long.push(`${file}: ${count} lines`);
      }
    }
    expect(
      long,
      `split these, or say in their first ${REASON_WITHIN_LINES} lines why they are "longer than 400 lines because ..."`,
    ).toEqual([]);
    expect(stale, `remove from LONG_FILES_ALLOWED: ${stale.join(', ')}`).toEqual([]);
    expect([...LONG_FILES_ALLOWED].filter((f) => !files.includes(f))).toEqual([]);
  });
});
