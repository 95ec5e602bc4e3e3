import { randomBytes } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { afterAll, describe, expect, it } from 'vitest';

/**
 * Every ```ts block of README.md and docs/*.md is a program a user may paste: it must typecheck
 * against the workspace sources with the repo's strict options, so that an API change that breaks
 * a documented example fails here instead of in a user's editor. A block whose first line is
 * `// not compiled: <reason>` (a signature list, a fragment) is skipped. All blocks are checked in
 * one TypeScript program, so the test costs one type check, not one per block.
 */

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

/**
 * Doc files not checked yet. issue 9: docs/api.md is being rewritten by tier with compiled examples;
 * empty this list when that lands.
 */
const SKIP_UNTIL_API_REWRITE: readonly string[] = [];

/** The first line that exempts a block, with its reason. */
const NOT_COMPILED = /^\/\/ not compiled: \S/;

interface Snippet {
  /** Repo-relative markdown file. */
  doc: string;
  /** 1-based line of the block's first code line in `doc`. */
  line: number;
  code: string;
}

/** The ```ts / ```typescript blocks of one markdown file. */
function extractSnippets(doc: string, markdown: string): Snippet[] {
  const snippets: Snippet[] = [];
  const lines = markdown.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})\s*(ts|typescript)\s*$/.exec(lines[i] as string);
    if (!open) continue;
    const fence = open[2] as string;
    const body: string[] = [];
    let j = i + 1;
    while (j < lines.length && !(lines[j] as string).trim().startsWith(fence)) {
      body.push(lines[j] as string);
      j++;
    }
    snippets.push({ doc, line: i + 2, code: body.join('\n') });
    i = j;
  }
  return snippets;
}

/** README.md and docs/*.md, repo-relative, without the skipped ones. */
function docFiles(): string[] {
  const docs = readdirSync(join(REPO, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`);
  return ['README.md', ...docs].filter((doc) => !SKIP_UNTIL_API_REWRITE.includes(doc)).sort();
}

/**
 * A folder inside the repo (gitignored) whose node_modules links every workspace package and their
 * direct dependencies, as pnpm links them for a package: snippets import `@userspace-proxy/*` and,
 * say, `@kubernetes/client-node`, and resolve to the sources through the `@userspace-proxy/source`
 * condition, as the repo's tsconfig.json does.
 */
function snippetFolder(): string {
  const dir = join(REPO, '.doc-snippets-tmp', `${process.pid}-${randomBytes(4).toString('hex')}`);
  const modules = join(dir, 'node_modules');
  mkdirSync(join(modules, '@userspace-proxy'), { recursive: true });
  const link = (name: string, target: string): void => {
    const at = join(modules, name);
    if (existsSync(at)) return;
    mkdirSync(dirname(at), { recursive: true });
    symlinkSync(target, at, 'dir');
  };
  for (const pkg of readdirSync(join(REPO, 'packages'))) {
    const root = join(REPO, 'packages', pkg);
    if (!existsSync(join(root, 'package.json'))) continue;
    const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      name: string;
      dependencies?: Record<string, string>;
    };
    link(manifest.name, root);
    for (const dep of Object.keys(manifest.dependencies ?? {})) {
      const target = join(root, 'node_modules', dep);
      if (!dep.startsWith('@userspace-proxy/') && existsSync(target)) link(dep, target);
    }
  }
  writeFileSync(join(dir, 'package.json'), '{ "type": "module", "private": true }\n');
  return dir;
}

/** A block that must fail, so that a checker which sees no errors at all cannot pass the test. */
const CANARY = "const shouldFail: number = 'a string';\nexport { shouldFail };";

describe('doc snippets typecheck (issue 9)', () => {
  const folder = snippetFolder();
  // KEEP_SNIPPETS=1 keeps the folder, to run `tsc -p <folder>/tsconfig.json` on it by hand.
  afterAll(() => {
    if (process.env.KEEP_SNIPPETS) return;
    rmSync(folder, { recursive: true, force: true });
    try {
      rmdirSync(dirname(folder)); // only when no other run is using it
    } catch {}
  });

  it('compiles every ts block of README.md and docs/*.md in one program', () => {
    const snippets = docFiles().flatMap((doc) =>
      extractSnippets(doc, readFileSync(join(REPO, doc), 'utf8')),
    );
    const compiled = snippets.filter((s) => !NOT_COMPILED.test(s.code.split('\n', 1)[0] ?? ''));
    expect(compiled.length).toBeGreaterThan(0);

    const byFile = new Map<string, Snippet>();
    compiled.forEach((snippet, i) => {
      const file = join(folder, `snippet-${i}.ts`);
      // `export {}` makes each block a module of its own: top-level await, no clashing names.
      writeFileSync(file, `${snippet.code}\nexport {};\n`);
      byFile.set(file, snippet);
    });
    const canary = join(folder, 'canary.ts');
    writeFileSync(canary, `${CANARY}\n`);

    const tsconfig = join(folder, 'tsconfig.json');
    writeFileSync(
      tsconfig,
      JSON.stringify({
        extends: join(REPO, 'tsconfig.base.json'),
        compilerOptions: {
          noEmit: true,
          customConditions: ['@userspace-proxy/source'],
          // A snippet shows one use; values it declares for the reader need not all be read.
          noUnusedLocals: false,
        },
        files: [...byFile.keys(), canary],
      }),
    );
    const parsed = ts.getParsedCommandLineOfConfigFile(
      tsconfig,
      {},
      {
        ...ts.sys,
        onUnRecoverableConfigFileDiagnostic: (d) => {
          throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
        },
      },
    );
    if (parsed === undefined) throw new Error('no tsconfig');
    const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options });
    const failures: string[] = [];
    let canaryFailed = false;
    // Diagnostics of the snippet files only: the workspace sources they import are checked by the
    // repo's own tsc run, and checking them again here would cost most of the time.
    const diagnostics = [
      ...program.getOptionsDiagnostics(),
      ...program.getGlobalDiagnostics(),
      ...[...byFile.keys(), canary].flatMap((file) => {
        const source = program.getSourceFile(file);
        if (source === undefined) throw new Error(`not in the program: ${file}`);
        return [
          ...program.getSyntacticDiagnostics(source),
          ...program.getSemanticDiagnostics(source),
        ];
      }),
    ];
    for (const d of diagnostics) {
      const text = ts.flattenDiagnosticMessageText(d.messageText, ' ');
      const name = d.file?.fileName ?? '';
      if (resolve(name) === canary) {
        canaryFailed = true;
        continue;
      }
      const snippet = byFile.get(resolve(name));
      if (d.file === undefined || d.start === undefined || snippet === undefined) {
        failures.push(`(outside the snippets) ${name}: TS${d.code} ${text}`);
        continue;
      }
      const { line } = d.file.getLineAndCharacterOfPosition(d.start);
      failures.push(`${snippet.doc}:${snippet.line + line}: TS${d.code} ${text}`);
    }
    expect(canaryFailed, 'the canary block typechecked: the checker is not running').toBe(true);
    expect(
      failures,
      `doc snippets that do not compile (fix them, or start the block with "// not compiled: <reason>"):\n${failures.join('\n')}`,
    ).toEqual([]);
  }, 120_000);
});

describe('extractSnippets', () => {
  it('finds ts blocks with the line of their first code line, and nothing else', () => {
    const md = [
      '# t',
      '```ts',
      'const a = 1;',
      '```',
      '```sh',
      'ls',
      '```',
      '```typescript',
      'b',
      '```',
    ];
    expect(extractSnippets('x.md', md.join('\n'))).toEqual([
      { doc: 'x.md', line: 3, code: 'const a = 1;' },
      { doc: 'x.md', line: 9, code: 'b' },
    ]);
  });
});
