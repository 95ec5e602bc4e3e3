/**
 * Label and field selectors as the API server evaluates them, for the fake API server. Supports the
 * grammar clients send: `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, joined by
 * commas; field selectors use dotted paths with `=`, `==` and `!=`.
 */

export type Matcher = (obj: unknown) => boolean;

function splitTerms(selector: string): string[] {
  const terms: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of selector) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      terms.push(current.trim());
      current = '';
    } else current += ch;
  }
  if (current.trim() !== '') terms.push(current.trim());
  return terms.filter((t) => t !== '');
}

function labelsOf(obj: unknown): Record<string, string> {
  const labels = (obj as { metadata?: { labels?: Record<string, string> } })?.metadata?.labels;
  return labels ?? {};
}

/** Compiles a label selector; throws on syntax it does not know (the server answers 400). */
export function labelMatcher(selector: string | null): Matcher {
  if (!selector) return () => true;
  const checks: Matcher[] = splitTerms(selector).map((term) => {
    let m = /^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(term);
    if (m) {
      const [, key, op, list] = m as unknown as [string, string, string, string];
      const values = new Set(list.split(',').map((v) => v.trim()));
      return op === 'in'
        ? (o) => Object.hasOwn(labelsOf(o), key) && values.has(labelsOf(o)[key] as string)
        : (o) => !Object.hasOwn(labelsOf(o), key) || !values.has(labelsOf(o)[key] as string);
    }
    m = /^!\s*([^\s!=]+)$/.exec(term);
    if (m) {
      const key = m[1] as string;
      return (o) => !Object.hasOwn(labelsOf(o), key);
    }
    m = /^([^\s!=]+)\s*(==|=|!=)\s*(\S*)$/.exec(term);
    if (m) {
      const [, key, op, value] = m as unknown as [string, string, string, string];
      return op === '!='
        ? (o) => labelsOf(o)[key] !== value
        : (o) => Object.hasOwn(labelsOf(o), key) && labelsOf(o)[key] === value;
    }
    m = /^([^\s!=]+)$/.exec(term);
    if (m) {
      const key = m[1] as string;
      return (o) => Object.hasOwn(labelsOf(o), key);
    }
    throw new Error(`unable to parse requirement: ${term}`);
  });
  return (obj) => checks.every((check) => check(obj));
}

function fieldValue(obj: unknown, path: string): string {
  let cur: unknown = obj;
  for (const part of path.split('.')) {
    if (typeof cur !== 'object' || cur === null) return '';
    cur = (cur as Record<string, unknown>)[part];
  }
  return cur === undefined || cur === null ? '' : String(cur);
}

/** Compiles a field selector; throws on syntax it does not know. */
export function fieldMatcher(selector: string | null): Matcher {
  if (!selector) return () => true;
  const checks: Matcher[] = splitTerms(selector).map((term) => {
    const m = /^([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)$/.exec(term);
    if (!m) throw new Error(`invalid field selector: ${term}`);
    const [, path, op, value] = m as unknown as [string, string, string, string];
    return op === '!='
      ? (o) => fieldValue(o, path) !== value
      : (o) => fieldValue(o, path) === value;
  });
  return (obj) => checks.every((check) => check(obj));
}
