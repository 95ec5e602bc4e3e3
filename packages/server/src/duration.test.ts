import { describe, expect, it } from 'vitest';
import { DurationParseError, formatDuration, parseDuration } from './duration.js';

describe('parseDuration', () => {
  it.each([
    ['0', 0],
    ['250ms', 250],
    ['30s', 30_000],
    ['1m30s', 90_000],
    ['2h22m', 8_520_000],
    ['1.5s', 1500],
    ['.5s', 500],
    ['-1s', -1000],
    ['+2m', 120_000],
    ['100us', 0.1],
    ['100µs', 0.1],
    ['1500ns', 0.0015],
    ['15m0s', 900_000],
  ])('parses %s', (text, ms) => {
    expect(parseDuration(text)).toBeCloseTo(ms, 9);
  });

  it.each([
    ['', 'time: invalid duration ""'],
    ['x', 'time: invalid duration "x"'],
    ['5', 'time: missing unit in duration "5"'],
    ['1d', 'time: unknown unit "d" in duration "1d"'],
    ['.s', 'time: invalid duration ".s"'],
    ['1.5.3s', 'time: missing unit in duration "1.5.3s"'],
    ['-', 'time: invalid duration "-"'],
  ])('rejects %j with Go’s message', (text, message) => {
    expect(() => parseDuration(text)).toThrow(new DurationParseError(message));
  });
});

describe('formatDuration', () => {
  it.each([
    [0, '0s'],
    [250, '250ms'],
    [1000, '1s'],
    [1500, '1.5s'],
    [30_000, '30s'],
    [90_000, '1m30s'],
    [900_000, '15m0s'],
    [3_600_000, '1h0m0s'],
    [86_400_000, '24h0m0s'],
    [-1000, '-1s'],
    [0.5, '500µs'],
    [0.000_001, '1ns'],
    [1.25, '1.25ms'],
  ])('formats %d ms as %s, like Go', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });

  it('round-trips through parseDuration', () => {
    for (const ms of [1, 999, 61_001, 7_322_500])
      expect(parseDuration(formatDuration(ms))).toBe(ms);
  });
});
