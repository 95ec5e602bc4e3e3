import { describe, expect, it } from 'vitest';
import { LOG_VALUE_MAX_CHARS, logSafe, quoteForLog } from './log-safe.js';

describe('logSafe', () => {
  it('escapes control characters, C1 controls, line separators and bidi overrides', () => {
    expect(logSafe('a\x1b[31mb\r\n\x00\x7f\u0085\u2028\u202e\tz')).toBe(
      'a\\x1b[31mb\\r\\n\\x00\\x7f\\x85\\u2028\\u202e\\tz',
    );
    expect(logSafe('plain text, ünïcödé and emoji 😀')).toBe('plain text, ünïcödé and emoji 😀');
  });

  it('cuts long text and says how much was left out', () => {
    const long = 'x'.repeat(1024 * 1024);
    const safe = logSafe(long);
    expect(safe).toBe(
      `${'x'.repeat(LOG_VALUE_MAX_CHARS)}…(${1024 * 1024 - LOG_VALUE_MAX_CHARS} more)`,
    );
    expect(logSafe('abcdef', 3)).toBe('abc…(3 more)');
    expect(logSafe('abc', 3)).toBe('abc');
  });

  it('counts escapes against the bound and never splits a surrogate pair', () => {
    expect(logSafe('\x1b\x1b\x1b', 8)).toBe('\\x1b\\x1b…(1 more)');
    expect(logSafe('a😀', 2)).toBe('a…(2 more)');
  });
});

describe('quoteForLog', () => {
  it('quotes strings safely and names other values by their type', () => {
    expect(quoteForLog('Serv"ice\x1b')).toBe('"Serv\\"ice\\x1b"');
    expect(quoteForLog(3)).toBe('3');
    expect(quoteForLog(null)).toBe('null');
    expect(quoteForLog({ huge: 'x'.repeat(1e6) })).toBe('an object');
    expect(quoteForLog(['a'])).toBe('a list');
    expect(quoteForLog(undefined)).toBe('undefined');
  });
});
