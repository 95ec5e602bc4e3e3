/**
 * Go-style durations ("250ms", "30s", "1h2m3.5s"), because kube-proxy's flags and its
 * KubeProxyConfiguration file write every period that way, and operators copy values between them.
 * Inside the daemon a duration is a number of milliseconds.
 */

const UNIT_NS: Readonly<Record<string, number>> = {
  ns: 1,
  us: 1e3,
  µs: 1e3,
  μs: 1e3,
  ms: 1e6,
  s: 1e9,
  m: 60e9,
  h: 3600e9,
};

/** Thrown by {@link parseDuration}; the message is Go's `time.ParseDuration` text. */
export class DurationParseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DurationParseError';
  }
}

/**
 * Parses a Go duration into milliseconds. Accepts what `time.ParseDuration` accepts: an optional
 * sign, then one or more decimal numbers each followed by a unit (ns, us, µs, ms, s, m, h), or "0".
 * @throws DurationParseError with Go's message, such as `time: invalid duration "5"`.
 */
export function parseDuration(text: string): number {
  const quoted = JSON.stringify(text);
  let rest = text;
  let sign = 1;
  if (rest.startsWith('-') || rest.startsWith('+')) {
    sign = rest.startsWith('-') ? -1 : 1;
    rest = rest.slice(1);
  }
  if (rest === '0') return 0;
  if (rest === '') throw new DurationParseError(`time: invalid duration ${quoted}`);
  let totalNs = 0;
  while (rest !== '') {
    const number = /^(\d*)(?:\.(\d*))?/.exec(rest);
    const whole = number?.[1] ?? '';
    const frac = number?.[2] ?? '';
    if (number === null || (whole === '' && frac === '')) {
      throw new DurationParseError(`time: invalid duration ${quoted}`);
    }
    rest = rest.slice(number[0].length);
    const unit = /^[^\d.]+/.exec(rest)?.[0];
    if (unit === undefined)
      throw new DurationParseError(`time: missing unit in duration ${quoted}`);
    const scale = UNIT_NS[unit];
    if (scale === undefined) {
      throw new DurationParseError(
        `time: unknown unit ${JSON.stringify(unit)} in duration ${quoted}`,
      );
    }
    rest = rest.slice(unit.length);
    totalNs += Number(whole === '' ? '0' : whole) * scale + Number(`0.${frac || '0'}`) * scale;
    if (!Number.isSafeInteger(Math.round(totalNs))) {
      throw new DurationParseError(`time: invalid duration ${quoted}`);
    }
  }
  return (sign * Math.round(totalNs)) / 1e6;
}

/** "1.5" from (1500, 1000): an integer part and the fraction without trailing zeros. */
function fixed(value: number, unit: number): string {
  const whole = Math.floor(value / unit);
  const frac = value - whole * unit;
  if (frac === 0) return String(whole);
  const digits = String(unit).length - 1;
  return `${whole}.${String(frac).padStart(digits, '0').replace(/0+$/, '')}`;
}

/**
 * Formats milliseconds the way Go's `time.Duration.String()` does ("0s", "250ms", "1m30s",
 * "15m0s", "1h0m0s"), so validation messages and /configz show what kube-proxy would.
 */
export function formatDuration(ms: number): string {
  const totalNs = Math.round(ms * 1e6);
  if (totalNs === 0) return '0s';
  const sign = totalNs < 0 ? '-' : '';
  const ns = Math.abs(totalNs);
  if (ns < 1e3) return `${sign}${ns}ns`;
  if (ns < 1e6) return `${sign}${fixed(ns, 1e3)}µs`;
  if (ns < 1e9) return `${sign}${fixed(ns, 1e6)}ms`;
  const hours = Math.floor(ns / 3600e9);
  const minutes = Math.floor((ns - hours * 3600e9) / 60e9);
  const seconds = fixed(ns - hours * 3600e9 - minutes * 60e9, 1e9);
  if (hours > 0) return `${sign}${hours}h${minutes}m${seconds}s`;
  if (minutes > 0) return `${sign}${minutes}m${seconds}s`;
  return `${sign}${seconds}s`;
}
