import type { NetworkInterfaceInfo } from 'node:os';
import type { NetworkInterfacesFn } from '../proxier/node-port-addresses.js';

/**
 * Fake `os.networkInterfaces()` answers, so tests can describe any host: which addresses are local,
 * internal, IPv6 link-local. Only `address`, `family` and `internal` matter to the proxy.
 */

/** One interface address as `os.networkInterfaces()` reports it. */
export function nic(address: string, internal = false): NetworkInterfaceInfo {
  const v6 = address.includes(':');
  return {
    address,
    netmask: v6 ? 'ffff:ffff:ffff:ffff::' : '255.255.255.0',
    family: v6 ? 'IPv6' : 'IPv4',
    mac: '00:00:00:00:00:00',
    internal,
    cidr: null,
    ...(v6 ? { scopeid: 0 } : {}),
  } as NetworkInterfaceInfo;
}

/** A host with 127.0.0.1 on lo and 10.99.0.1 (its only other address) on eth0. */
export const fakeHost: NetworkInterfacesFn = () => ({
  lo: [nic('127.0.0.1', true)],
  eth0: [nic('10.99.0.1')],
});
