/**
 * Making text taken from input safe to log. A manifest, a configuration file or an API object can
 * hold anything: a megabyte name becomes a megabyte log line, and an ESC, CR or NUL in a name or in a
 * YAML error excerpt rewrites the operator's terminal or splits one line of a log collector into two.
 * Every input-derived string the daemon logs goes through {@link logSafe}: control characters are
 * shown as escapes (`\x1b`, `\r`, `\x00`), and the text is cut at a bound with `…(N more)`.
 *
 * Core applies it to every input-derived string it puts in a log line or an Event message (the
 * values validation quotes, `reportInvalidObject`'s kind, key and reason); the daemon, the Kubernetes
 * adapter and embedders use the same helpers (exported from `@userspace-proxy/core/diagnostics`) for what they
 * log themselves.
 */

/** How much of one input value (a kind, an apiVersion, a name) is logged. */
export const LOG_VALUE_MAX_CHARS = 200;

/**
 * How much of one composed message that embeds input values (a validation reason, a YAML error) is
 * logged: enough for any reason the validators give, never a megabyte.
 */
export const LOG_MESSAGE_MAX_CHARS = 1000;

const NAMED: Readonly<Record<number, string>> = {
  8: '\\b',
  9: '\\t',
  10: '\\n',
  11: '\\v',
  12: '\\f',
  13: '\\r',
};

/**
 * True for what must not reach a log raw: C0 controls, DEL, C1 controls (which some terminals obey
 * like ESC sequences), the Unicode line and paragraph separators (line breaks to some collectors), and
 * the bidirectional overrides (which make a log line read differently from what it holds).
 */
function unsafe(code: number): boolean {
  return (
    code < 0x20 ||
    (code >= 0x7f && code <= 0x9f) ||
    code === 0x2028 ||
    code === 0x2029 ||
    (code >= 0x202a && code <= 0x202e) ||
    (code >= 0x2066 && code <= 0x2069)
  );
}

function escapeCode(code: number): string {
  const named = NAMED[code];
  if (named !== undefined) return named;
  if (code <= 0xff) return `\\x${code.toString(16).padStart(2, '0')}`;
  return `\\u${code.toString(16).padStart(4, '0')}`;
}

/**
 * `text` with control characters escaped, cut after about `max` characters of output with
 * `…(N more)` (N counts the characters of `text` left out). Only the part that is kept is looked at,
 * so a megabyte string costs no more than a short one; a surrogate pair is never split.
 */
export function logSafe(text: string, max: number = LOG_VALUE_MAX_CHARS): string {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const code = text.charCodeAt(i);
    let piece: string;
    let width = 1;
    if (unsafe(code)) piece = escapeCode(code);
    else if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      width = next >= 0xdc00 && next <= 0xdfff ? 2 : 1;
      piece = text.slice(i, i + width);
    } else piece = text[i] as string;
    if (out.length + piece.length > max) break;
    out += piece;
    i += width;
  }
  return i < text.length ? `${out}…(${text.length - i} more)` : out;
}

/**
 * A value from input quoted for a message: a string in double quotes (made safe by
 * {@link logSafe}), a number, boolean or null as itself, anything else by its type, since an object
 * in the place of a name is a mistake worth naming but not worth printing.
 */
export function quoteForLog(value: unknown, max: number = LOG_VALUE_MAX_CHARS): string {
  if (typeof value === 'string') return `"${logSafe(value, max).replaceAll('"', '\\"')}"`;
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) {
    return String(value);
  }
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'object' ? 'an object' : typeof value;
}
