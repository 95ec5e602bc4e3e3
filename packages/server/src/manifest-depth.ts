/**
 * A bound on how deeply a manifest nests, checked on the text before the YAML parser sees it. The
 * parser's time and memory grow steeply with depth (a 4 MiB document of nested flow maps took
 * seconds and gigabytes, then failed with a stack overflow), while a Kubernetes object nests about
 * ten levels, a List of them twelve. The scan is linear and allocates nothing per character; it
 * follows YAML closely enough to count block indentation, compact `- - x` entries and flow `[ {`
 * collections, skipping quoted scalars, comments and block scalars (`|`, `>`). It counts at most one
 * level more than the parsed value has (the tests check this on real manifests), so with a limit far
 * above what Kubernetes objects need, a valid manifest is never refused.
 */

/** Where a manifest first nests deeper than allowed. */
export interface NestingExcess {
  /** 1-based line number. */
  line: number;
  /** The depth reached there (more than the limit). */
  depth: number;
}

const SPACE = 0x20;
const TAB = 0x09;
const NL = 0x0a;
const CR = 0x0d;
const HASH = 0x23;
const DQUOTE = 0x22;
const SQUOTE = 0x27;

/** Whitespace, a line end, or the end of the text (NaN from charCodeAt). */
function isBlank(code: number): boolean {
  return code === SPACE || code === TAB || code === NL || code === CR || Number.isNaN(code);
}

/** The first place where `text` nests deeper than `max` levels, or undefined. */
export function findExcessiveNesting(text: string, max: number): NestingExcess | undefined {
  const indents: number[] = []; // indentation of the enclosing block lines
  let flow = 0; // open flow collections
  let quote = 0; // the open quote character, 0 outside quoted scalars
  let blockScalarParent = -1; // indentation of the line that opened a block scalar, -1 outside one
  let line = 0;
  let lineStart = 0;
  while (lineStart <= text.length) {
    let end = text.indexOf('\n', lineStart);
    if (end === -1) end = text.length;
    line++;
    let i = lineStart;
    let indent = 0;
    const next = end + 1;
    if (quote === 0 && flow === 0) {
      while (i < end && text.charCodeAt(i) === SPACE) i++;
      indent = i - lineStart;
      const first = text.charCodeAt(i);
      const blank = i >= end || first === HASH || (first === CR && i + 1 >= end);
      if (blockScalarParent >= 0 && (blank || indent > blockScalarParent)) {
        lineStart = next;
        continue; // the content of a block scalar
      }
      blockScalarParent = -1;
      if (blank) {
        lineStart = next;
        continue;
      }
      if (
        indent === 0 &&
        (text.startsWith('---', i) || text.startsWith('...', i)) &&
        isBlank(text.charCodeAt(i + 3))
      ) {
        indents.length = 0; // a new document
        i += 3;
      }
      while (indents.length > 0 && (indents[indents.length - 1] as number) >= indent) indents.pop();
      indents.push(indent);
    }
    let depth = indents.length;
    let valueStart = quote === 0;
    for (; i < end; i++) {
      const c = text.charCodeAt(i);
      if (quote !== 0) {
        if (c === 0x5c /* \ */ && quote === DQUOTE) i++;
        else if (c === quote) {
          if (quote === SQUOTE && text.charCodeAt(i + 1) === SQUOTE) i++;
          else quote = 0;
        }
        continue;
      }
      if (c === SPACE || c === TAB || c === CR) continue;
      if (c === HASH && isBlank(text.charCodeAt(i - 1))) break; // a comment
      if (flow === 0) {
        const indicator = c === 0x2d /* - */ || c === 0x3f; /* ? */
        if (indicator && valueStart && isBlank(text.charCodeAt(i + 1))) {
          depth++; // a compact entry: "- - x" nests
        } else if (c === 0x3a /* : */ && isBlank(text.charCodeAt(i + 1))) {
          valueStart = true;
        } else if (valueStart && (c === 0x7c /* | */ || c === 0x3e) /* > */) {
          blockScalarParent = indent;
          break;
        } else if (valueStart && (c === 0x5b /* [ */ || c === 0x7b) /* { */) {
          flow++;
        } else if (valueStart && (c === DQUOTE || c === SQUOTE)) {
          quote = c;
          valueStart = false;
        } else {
          valueStart = false; // a plain scalar: brackets in it are text
        }
      } else if (c === 0x5b || c === 0x7b) {
        flow++;
        valueStart = true;
      } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) {
        flow--;
        valueStart = false;
      } else if (c === 0x2c /* , */ || c === 0x3a) {
        valueStart = true;
      } else if (valueStart && (c === DQUOTE || c === SQUOTE)) {
        quote = c;
        valueStart = false;
      } else {
        valueStart = false;
      }
      if (depth + flow > max) return { line, depth: depth + flow };
    }
    if (depth + flow > max) return { line, depth: depth + flow };
    lineStart = next;
  }
  return undefined;
}
