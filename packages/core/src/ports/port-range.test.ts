import { describe, expect, it } from 'vitest';
import { InvalidPortRangeError } from '../errors.js';
import { formatPortRange, OS_CHOSEN_PORT_RANGE, parsePortRange } from './port-range.js';

describe('parsePortRange', () => {
  it('reads "lo-hi" as an inclusive range', () => {
    expect(parsePortRange('30000-30099')).toEqual({ base: 30000, size: 100 });
    expect(parsePortRange('1-65535')).toEqual({ base: 1, size: 65535 });
    expect(parsePortRange('80-80')).toEqual({ base: 80, size: 1 });
  });

  it('reads "lo+n" as lo … lo+n, n+1 ports (kube-proxy reads the offset inclusively)', () => {
    expect(parsePortRange('30000+99')).toEqual({ base: 30000, size: 100 });
    expect(parsePortRange('5+0')).toEqual({ base: 5, size: 1 });
    expect(parsePortRange('65534+1')).toEqual({ base: 65534, size: 2 });
  });

  it('reads a single port as a range of one', () => {
    expect(parsePortRange('8080')).toEqual({ base: 8080, size: 1 });
    expect(parsePortRange('65535')).toEqual({ base: 65535, size: 1 });
  });

  it('reads "", "0", "0-0" and "0+0" as OS-chosen ports', () => {
    for (const text of ['', '   ', '0', '0-0', '0+0', ' 0 - 0 ']) {
      expect(parsePortRange(text), text).toEqual({ base: 0, size: 0 });
    }
    expect(OS_CHOSEN_PORT_RANGE).toEqual({ base: 0, size: 0 });
  });

  it('trims whitespace around the value and around the separator', () => {
    expect(parsePortRange('  30000-30009\n')).toEqual({ base: 30000, size: 10 });
    expect(parsePortRange('30000 - 30009')).toEqual({ base: 30000, size: 10 });
    expect(parsePortRange('\t30000 + 9 ')).toEqual({ base: 30000, size: 10 });
  });

  it('returns a fresh object each time, so callers cannot corrupt the OS-chosen constant', () => {
    const a = parsePortRange('');
    a.base = 5;
    expect(parsePortRange('')).toEqual({ base: 0, size: 0 });
  });

  const invalid: [string, RegExp][] = [
    ['30099-30000', /end port cannot be less than the start port/],
    ['0-100', /ports start at 1/],
    ['0+5', /ports start at 1/],
    ['65536', /cannot go past 65535/],
    ['1-65536', /cannot go past 65535/],
    ['65535+1', /cannot go past 65535/],
    ['65000+1000', /cannot go past 65535/],
    ['99999999999999999999999', /cannot go past 65535/],
    ['-5', /negative/],
    ['-5-10', /negative/],
    ['5--10', /more than one "-"/],
    ['1-2-3', /more than one "-"/],
    ['1+2+3', /more than one "\+"/],
    ['1-2+3', /either "lo-hi" or "lo\+n"/],
    ['abc', /"abc" is not a port number/],
    ['80a', /not a port number/],
    ['0x50', /not a port number/],
    ['1e3', /not a port number/],
    ['8.5', /not a port number/],
    ['+5', /a port number is missing/],
    ['5-', /a port number is missing/],
    ['5+', /a port number is missing/],
    ['-', /negative/],
    ['30000 30010', /not a port number/],
  ];
  for (const [text, reason] of invalid) {
    it(`rejects ${JSON.stringify(text)} with a clear InvalidPortRangeError`, () => {
      let caught: unknown;
      try {
        parsePortRange(text);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(InvalidPortRangeError);
      const error = caught as InvalidPortRangeError;
      expect(error.code).toBe('ERR_INVALID_PORT_RANGE');
      expect(error.message).toContain(JSON.stringify(text));
      expect(error.message).toMatch(reason);
    });
  }

  it('rejects a value that is not a string instead of crashing', () => {
    for (const value of [undefined, null, 30000, { base: 1 }]) {
      expect(() => parsePortRange(value as unknown as string)).toThrow(InvalidPortRangeError);
    }
  });
});

describe('formatPortRange', () => {
  it('writes "lo-hi" for messages', () => {
    expect(formatPortRange({ base: 30000, size: 100 })).toBe('30000-30099');
    expect(formatPortRange({ base: 8080, size: 1 })).toBe('8080-8080');
  });

  it('writes "0-0" for OS-chosen ports', () => {
    expect(formatPortRange({ base: 0, size: 0 })).toBe('0-0');
  });

  it('round-trips through parsePortRange', () => {
    for (const text of ['1-1', '30000-30099', '1-65535', '65535-65535', '0-0']) {
      expect(formatPortRange(parsePortRange(text))).toBe(text);
    }
  });
});
