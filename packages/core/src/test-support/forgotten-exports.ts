import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

/** One entry point of a package, as its package.json "exports" names it. */
export interface PackageEntry {
  /** The import specifier a user writes, e.g. `@userspace-proxy/core/sockets`. */
  specifier: string;
  /** The TypeScript source the `@userspace-proxy/source` condition resolves it to. */
  source: string;
}

/** A type a public declaration refers to that no entry point of the same package exports. */
export interface ForgottenExport {
  /** The entry point whose export refers to it. */
  specifier: string;
  /** The exported name whose declaration mentions it. */
  exportedAs: string;
  /** The name of the unexported type. */
  name: string;
  /** Where it is declared, relative to the repository root. */
  declaredIn: string;
}

/** Reads a package's entry points from its package.json "exports" (source condition). */
export function packageEntries(packageDir: string): PackageEntry[] {
  const manifest = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as {
    name: string;
    exports: Record<string, Record<string, string>>;
  };
  return Object.entries(manifest.exports).flatMap(([key, conditions]) => {
    const source = conditions['@userspace-proxy/source'];
    if (source === undefined) return [];
    const specifier = key === '.' ? manifest.name : `${manifest.name}/${key.slice(2)}`;
    return [{ specifier, source: resolve(packageDir, source) }];
  });
}

/**
 * Finds the types that public declarations refer to but no entry point of their package exports
 * (API Extractor's "forgotten export"). Such a type is part of the contract — a user implementing an
 * interface or passing an options object has to spell it — yet cannot be imported, so they copy it
 * or reach into `dist/`. Members tagged `@internal` are skipped. Walks every exported declaration's syntax (signatures, public members,
 * heritage clauses, type arguments), resolves each type reference to its symbol, and reports those
 * declared inside the package that none of its entry points exports. Types from elsewhere (Node,
 * prom-client, another workspace package) are that package's business and are skipped. One program
 * covers every package given, since building one costs seconds.
 */
export function findForgottenExports(repoRoot: string, packageDirs: string[]): ForgottenExport[] {
  const packages = packageDirs.map((dir) => ({ dir, entries: packageEntries(dir) }));
  const config = ts.getParsedCommandLineOfConfigFile(
    join(repoRoot, 'tsconfig.json'),
    { noEmit: true },
    { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} },
  );
  if (config === undefined) throw new Error('tsconfig.json could not be read');
  const program = ts.createProgram(
    packages.flatMap((p) => p.entries.map((e) => e.source)),
    config.options,
  );
  const checker = program.getTypeChecker();
  const resolveAlias = (symbol: ts.Symbol): ts.Symbol =>
    symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;

  const found: ForgottenExport[] = [];
  for (const { dir, entries } of packages) {
    const ownDir = `${resolve(dir, 'src')}/`;
    const exported = new Set<ts.Symbol>();
    const perEntry: { entry: PackageEntry; symbols: [string, ts.Symbol][] }[] = [];
    for (const entry of entries) {
      const file = program.getSourceFile(entry.source);
      const moduleSymbol = file && checker.getSymbolAtLocation(file);
      if (moduleSymbol === undefined) throw new Error(`no module for ${entry.source}`);
      const symbols = checker
        .getExportsOfModule(moduleSymbol)
        .map((s) => [s.name, resolveAlias(s)] as [string, ts.Symbol]);
      for (const [, symbol] of symbols) exported.add(symbol);
      perEntry.push({ entry, symbols });
    }
    const seen = new Set<ts.Symbol>();
    for (const { entry, symbols } of perEntry) {
      for (const [exportedAs, symbol] of symbols) {
        for (const declaration of symbol.declarations ?? []) {
          visit(declaration, (node) => {
            if (!ts.isTypeReferenceNode(node) && !ts.isExpressionWithTypeArguments(node)) return;
            const where = ts.isTypeReferenceNode(node) ? node.typeName : node.expression;
            const target = checker.getSymbolAtLocation(where);
            if (target === undefined) return;
            const real = resolveAlias(target);
            if (exported.has(real) || seen.has(real)) return;
            if (real.flags & ts.SymbolFlags.TypeParameter) return;
            const declaredAt = real.declarations?.[0]?.getSourceFile().fileName;
            if (declaredAt === undefined || !declaredAt.startsWith(ownDir)) return;
            seen.add(real);
            found.push({
              specifier: entry.specifier,
              exportedAs,
              name: real.name,
              declaredIn: relative(repoRoot, declaredAt),
            });
          });
        }
      }
    }
  }
  return found.sort((a, b) => a.name.localeCompare(b.name));
}

/** Visits a declaration's nodes, skipping function bodies and initialisers (not part of the type). */
function visit(node: ts.Node, each: (node: ts.Node) => void): void {
  each(node);
  ts.forEachChild(node, (child) => {
    if (ts.isBlock(child)) return;
    if (
      (ts.isVariableDeclaration(node) || ts.isPropertyDeclaration(node) || ts.isParameter(node)) &&
      child === node.initializer &&
      node.type !== undefined
    ) {
      return;
    }
    // Private members (`#x` and `private x`) are no user's business.
    if (ts.isClassElement(child) && isPrivateMember(child)) return;
    if (isInternal(child)) return;
    visit(child, each);
  });
}

/**
 * A member tagged `@internal` in its JSDoc: public only because two modules of the package call each
 * other through it, documented in docs/api.md (its introduction) as no part of the contract.
 */
function isInternal(node: ts.Node): boolean {
  return ts.getJSDocTags(node).some((tag) => tag.tagName.text === 'internal');
}

/** `#x`, `private x` and private constructors: no user can reach them, so neither their types. */
function isPrivateMember(member: ts.ClassElement): boolean {
  if (member.name !== undefined && ts.isPrivateIdentifier(member.name)) return true;
  return (ts.getCombinedModifierFlags(member as ts.Declaration) & ts.ModifierFlags.Private) !== 0;
}

/** The directory of this repository, from this file's location. */
export const REPO_ROOT = resolve(dirname(new URL(import.meta.url).pathname), '../../../..');
