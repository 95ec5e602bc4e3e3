import { InvalidPortRangeError } from '../errors.js';

/**
 * A contiguous block of ports, `base` … `base + size - 1`. It is a plain object so that it can come
 * from a configuration file as is. `base` 0 (size 0) means "no range": every proxy socket binds port 0
 * and the OS picks an ephemeral port, which needs no bookkeeping and cannot run out.
 */
export interface PortRange {
  /** The first port, or 0 for OS-chosen ports. */
  base: number;
  /** How many ports, or 0 for OS-chosen ports. */
  size: number;
}

/** The highest TCP/UDP/SCTP port; ranges may not reach past it. */
const MAX_PORT = 65_535;

/** The range that means "let the OS choose": what `""`, `"0"` and `"0-0"` parse to. */
export const OS_CHOSEN_PORT_RANGE: Readonly<PortRange> = Object.freeze({ base: 0, size: 0 });

const DIGITS = /^\d+$/;

/**
 * Parses the `portRange` option (kube-proxy's `--proxy-port-range`). Accepted forms, after trimming
 * whitespace: `"lo-hi"` (inclusive), `"lo+n"` (lo … lo+n, so n+1 ports, as kube-proxy reads it), a
 * single `"n"`, and `""`, `"0"`, `"0-0"` or `"0+0"` for OS-chosen ports ({@link OS_CHOSEN_PORT_RANGE}).
 * Everything else is an {@link InvalidPortRangeError} whose message says what is wrong, because a typo
 * in a flag should stop the daemon at start rather than surface as a failed allocation later.
 * @throws InvalidPortRangeError
 */
export function parsePortRange(text: string): PortRange {
  if (typeof text !== 'string') {
    throw new InvalidPortRangeError(String(text), 'expected a string such as "30000-30099"');
  }
  const value = text.trim();
  if (value === '') return { ...OS_CHOSEN_PORT_RANGE };
  if (value.startsWith('-')) {
    throw new InvalidPortRangeError(text, 'ports cannot be negative');
  }

  const hyphen = value.indexOf('-');
  const plus = value.indexOf('+');
  if (hyphen !== -1 && plus !== -1) {
    throw new InvalidPortRangeError(text, 'use either "lo-hi" or "lo+n", not both');
  }
  const separator = hyphen !== -1 ? '-' : plus !== -1 ? '+' : '';
  const parts = separator === '' ? [value] : value.split(separator);
  if (parts.length > 2) {
    throw new InvalidPortRangeError(text, `more than one "${separator}"`);
  }
  const numbers = parts.map((part) => parseNumber(text, part.trim()));
  const low = numbers[0] as number;
  const second = numbers[1];

  let high: number;
  if (separator === '+') {
    high = low + (second as number);
  } else if (separator === '-') {
    high = second as number;
  } else {
    high = low;
  }

  if (low === 0 && high === 0) return { ...OS_CHOSEN_PORT_RANGE };
  if (low === 0) {
    throw new InvalidPortRangeError(
      text,
      'ports start at 1 (only "0-0" or "" mean OS-chosen ports)',
    );
  }
  if (low > MAX_PORT || high > MAX_PORT) {
    throw new InvalidPortRangeError(text, `the port range cannot go past ${MAX_PORT}`);
  }
  if (high < low) {
    throw new InvalidPortRangeError(text, 'the end port cannot be less than the start port');
  }
  return { base: low, size: high - low + 1 };
}

/** One side of a range: unsigned decimal digits only (no sign, exponent, hex or fraction). */
function parseNumber(text: string, part: string): number {
  if (part === '') {
    throw new InvalidPortRangeError(text, 'a port number is missing');
  }
  if (!DIGITS.test(part)) {
    throw new InvalidPortRangeError(text, `"${part}" is not a port number`);
  }
  // Long digit strings become large (or Infinity) and are caught by the range check.
  return Number(part);
}

/**
 * The range as `"lo-hi"` for messages and logs (`"30000-30099"`), or `"0-0"` for OS-chosen ports. The
 * result parses back to the same range with {@link parsePortRange}.
 */
export function formatPortRange(range: PortRange): string {
  if (range.base === 0 || range.size === 0) return '0-0';
  return `${range.base}-${range.base + range.size - 1}`;
}
