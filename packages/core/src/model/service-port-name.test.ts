import { describe, expect, it } from 'vitest';
import {
  joinHostPort,
  servicePortNameString,
  splitHostPort,
  splitHostPortText,
} from './service-port-name.js';

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

describe('splitHostPortText (Go net.SplitHostPort, port unchecked)', () => {
  it('splits bracketed and plain forms, keeping the port as text', () => {
    expect(splitHostPortText('[::1]:80')).toEqual({ host: '::1', port: '80' });
    expect(splitHostPortText('1.2.3.4:')).toEqual({ host: '1.2.3.4', port: '' });
    expect(splitHostPortText(':80')).toEqual({ host: '', port: '80' });
    expect(splitHostPortText('[]:x')).toEqual({ host: '', port: 'x' });
    expect(splitHostPortText('host:http')).toEqual({ host: 'host', port: 'http' });
  });
  it('rejects what Go rejects: no colon, too many colons, stray brackets', () => {
    for (const bad of [
      '',
      '1.2.3.4',
      'a:b:c',
      '::1',
      '[::1]',
      '[::1]80',
      '[::1]:8:0',
      '[a[b]:1',
      'a]:1',
      '[a]b]:80',
    ]) {
      expect(splitHostPortText(bad), bad).toBeUndefined();
    }
  });
});
