import { noopLogger, type PortalManager } from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import { defaultConfiguration } from './config-schema.js';
import {
  coreProxyMode,
  needsSourceNodeIPs,
  nodeIPsFor,
  proxierOptionsFor,
} from './proxier-options.js';

const recorder = { event: () => {} };
const portals: PortalManager = {
  open: async () => {},
  close: async () => {},
  cleanupLeftovers: async () => {},
};
const conntrack = { clearEntriesForIP: async () => {} };

describe('proxierOptionsFor', () => {
  it('maps every field of the configuration', () => {
    const c = defaultConfiguration();
    c.portRange = '30000-30100';
    c.nodePortAddresses = ['localhost'];
    c.iptables.syncPeriod = 20_000;
    c.iptables.minSyncPeriod = 500;
    c.udpIdleTimeout = 5000;
    c.userspaceProxy = {
      ...c.userspaceProxy,
      maxConnectionsPerPort: 100,
      maxUdpSessionsPerPort: 10,
      tcpIdleTimeout: 60_000,
      tcpHalfCloseTimeout: 1000,
      tcpKeepAlive: 0,
      dialTimeouts: [100, 200],
      udpBufferBytes: 65_536,
    };
    const options = proxierOptionsFor(c, { logger: noopLogger, recorder, portals, conntrack });
    expect(options).toEqual({
      mode: 'service-port-portal',
      listenIP: '0.0.0.0',
      portRange: '30000-30100',
      nodePortAddresses: ['localhost'],
      syncPeriodMs: 20_000,
      minSyncPeriodMs: 500,
      udpIdleTimeoutMs: 5000,
      proxySocket: {
        dialTimeoutsMs: [100, 200],
        maxConnections: 100,
        idleTimeoutMs: 60_000,
        halfCloseTimeoutMs: 1000,
        keepAliveMs: 0,
        maxUdpSessions: 10,
        udpBufferBytes: 65_536,
      },
      recorder,
      logger: noopLogger,
    });
  });

  it('uses the redirect design, with portals and conntrack, for mode "userspace"', () => {
    const c = defaultConfiguration();
    c.mode = 'userspace';
    c.bindAddress = '10.0.0.5';
    expect(coreProxyMode(c)).toBe('redirect');
    const options = proxierOptionsFor(c, { logger: noopLogger, recorder, portals, conntrack });
    expect(options).toMatchObject({
      mode: 'redirect',
      listenIP: '10.0.0.5',
      nodeIPs: ['10.0.0.5'],
    });
    expect(options.portals).toBe(portals);
    expect(options.conntrack).toBe(conntrack);
  });

  it('treats a blank mode as service-port-portal', () => {
    const c = defaultConfiguration();
    expect(coreProxyMode(c)).toBe('service-port-portal');
    c.mode = 'service-port-portal';
    expect(coreProxyMode(c)).toBe('service-port-portal');
  });
});

describe('nodeIPsFor', () => {
  it('prefers a specific bind address, then the source’s IPs, else leaves detection to core', () => {
    const c = defaultConfiguration();
    expect(nodeIPsFor(c)).toBeUndefined();
    expect(nodeIPsFor(c, [])).toBeUndefined();
    expect(nodeIPsFor(c, ['192.168.1.10'])).toEqual(['192.168.1.10']);
    c.bindAddress = '::';
    expect(nodeIPsFor(c, ['fd00::1'])).toEqual(['fd00::1']);
    c.bindAddress = '192.168.1.20';
    expect(nodeIPsFor(c, ['192.168.1.10'])).toEqual(['192.168.1.20']);
  });
});

describe('needsSourceNodeIPs', () => {
  it('is true only for "primary" without a specific bind address', () => {
    const c = defaultConfiguration();
    expect(needsSourceNodeIPs(c)).toBe(false);
    c.nodePortAddresses = ['localhost', 'primary'];
    expect(needsSourceNodeIPs(c)).toBe(true);
    c.bindAddress = '::';
    expect(needsSourceNodeIPs(c)).toBe(true);
    c.bindAddress = '10.0.0.5';
    expect(needsSourceNodeIPs(c)).toBe(false);
    c.bindAddress = '0.0.0.0';
    c.nodePortAddresses = ['10.0.0.0/8'];
    expect(needsSourceNodeIPs(c)).toBe(false);
  });
});
