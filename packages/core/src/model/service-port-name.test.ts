import { describe, expect, it } from 'vitest';
import { joinHostPort, servicePortNameString, splitHostPort } from './service-port-name.js';

describe('servicePortNameString', () => {
  it('names a port with its port name', () => {
    expect(servicePortNameString({ namespace: 'ns', name: 'web', port: 'http' })).toBe(
      'ns/web:http',
    );
  });
  it('leaves out an empty port name', () => {
    expect(servicePortNameString({ namespace: 'ns', name: 'web', port: '' })).toBe('ns/web');
  });
});

describe('joinHostPort / splitHostPort', () => {
  it('brackets IPv6 hosts and splits them back', () => {
    expect(joinHostPort('fd00::1', 80)).toBe('[fd00::1]:80');
    expect(splitHostPort('[fd00::1]:80')).toEqual({ host: 'fd00::1', port: 80 });
  });
  it('joins IPv4 hosts and hostnames as is', () => {
    expect(joinHostPort('10.0.0.1', 8080)).toBe('10.0.0.1:8080');
    expect(joinHostPort('endpoint1', 40)).toBe('endpoint1:40');
    expect(splitHostPort('endpoint1:40')).toEqual({ host: 'endpoint1', port: 40 });
  });
  it('rejects malformed strings', () => {
    for (const bad of [
      '',
      '1.2.3.4',
      '1.2.3.4:',
      ':80',
      '1.2.3.4:70000',
      'a:b:c',
      '[::1]80',
      'x:8a',
    ]) {
      expect(splitHostPort(bad), bad).toBeUndefined();
    }
  });
});
