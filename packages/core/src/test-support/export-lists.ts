import { readFileSync } from 'node:fs';

/**
 * The names an entry file exports, sorted: its `export { … } from` lists (types included, `as`
 * renames by their public name) and its own `export const|interface|type|class|function`
 * declarations. Read from the source text, so type-only exports count too, which a runtime
 * `import *` cannot see. For the tests that pin a package's public surface against docs/api.md.
 */
export function exportedNames(file: string | URL): string[] {
  const source = readFileSync(file, 'utf8');
  const names: string[] = [];
  for (const match of source.matchAll(/export\s+(?:type\s+)?\{([^}]*)\}\s+from/g)) {
    for (const part of (match[1] ?? '').split(',')) {
      const name =
        part
          .trim()
          .replace(/^type\s+/, '')
          .split(/\s+as\s+/)
          .pop() ?? '';
      if (name !== '') names.push(name);
    }
  }
  for (const match of source.matchAll(/^export (?:const|interface|type|class|function) (\w+)/gm)) {
    names.push(match[1] ?? '');
  }
  return names.sort();
}
