import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../errors.js';
import { nic } from '../test-support/fake-host.js';
import {
  detectPrimaryIPs,
  localAddresses,
  parseCidr,
  resolveNodePortAddresses,
} from './node-port-addresses.js';

const host = () => ({
  lo: [nic('127.0.0.1', true), nic('::1', true)],
  eth0: [nic('192.168.1.10'), nic('fe80::1'), nic('fd00::10')],
  eth1: [nic('10.1.0.5')],
});

describe('resolveNodePortAddresses', () => {
  it('means every address by default, for [] and for "all"', () => {
    expect(resolveNodePortAddresses(undefined, { networkInterfaces: host })).toEqual([null]);
    expect(resolveNodePortAddresses([], { networkInterfaces: host })).toEqual([null]);
    expect(resolveNodePortAddresses(['localhost', 'all'], { networkInterfaces: host })).toEqual([
      null,
    ]);
  });

  it('resolves CIDRs against the interfaces', () => {
    expect(
      resolveNodePortAddresses(['10.0.0.0/8', 'fd00::/64'], { networkInterfaces: host }),
    ).toEqual(['10.1.0.5', 'fd00::10']);
    expect(resolveNodePortAddresses(['172.16.0.0/12'], { networkInterfaces: host })).toEqual([]);
  });

  it('resolves "localhost" to the loopback addresses', () => {
    expect(resolveNodePortAddresses(['localhost'], { networkInterfaces: host })).toEqual([
      '127.0.0.1',
      '::1',
    ]);
  });

  it('resolves "primary" to nodeIPs, or to the detected primary IPs', () => {
    expect(
      resolveNodePortAddresses(['primary'], { nodeIPs: ['10.9.9.9'], networkInterfaces: host }),
    ).toEqual(['10.9.9.9']);
    expect(resolveNodePortAddresses(['primary'], { networkInterfaces: host })).toEqual([
      '192.168.1.10',
      'fd00::10',
    ]);
  });

  it('skips IPv6 link-local addresses and de-duplicates', () => {
    expect(
      resolveNodePortAddresses(['fe80::/10', '192.168.1.0/24', 'primary'], {
        networkInterfaces: host,
      }),
    ).toEqual(['192.168.1.10', 'fd00::10']);
  });

  it('refuses malformed entries with InvalidOptionError', () => {
    for (const bad of ['10.0.0.0', '10.0.0.0/33', 'fd00::/129', 'eth0', '', '1.2.3/8', 'x/8']) {
      expect(() => resolveNodePortAddresses([bad], { networkInterfaces: host }), bad).toThrow(
        InvalidOptionError,
      );
    }
    expect(() => resolveNodePortAddresses('all' as unknown as string[])).toThrow(
      InvalidOptionError,
    );
  });

  it('survives an interface lookup that throws', () => {
    const broken = () => {
      throw new Error('boom');
    };
    expect(resolveNodePortAddresses(['10.0.0.0/8'], { networkInterfaces: broken })).toEqual([]);
    expect(localAddresses(broken).size).toBe(0);
  });
});

describe('helpers', () => {
  it('detectPrimaryIPs picks the first non-internal address per family', () => {
    expect(detectPrimaryIPs(host)).toEqual(['192.168.1.10', 'fd00::10']);
  });
  it('localAddresses lists every interface address', () => {
    expect(localAddresses(host).has('10.1.0.5')).toBe(true);
    expect(localAddresses(host).has('127.1.0.1')).toBe(false);
  });
  it('parseCidr', () => {
    expect(parseCidr('10.0.0.0/8')).toEqual({ address: '10.0.0.0', prefix: 8, family: 4 });
    expect(parseCidr('::/0')).toEqual({ address: '::', prefix: 0, family: 6 });
    expect(parseCidr(42)).toBeUndefined();
    expect(parseCidr('10.0.0.0/1000')).toBeUndefined();
  });
});
