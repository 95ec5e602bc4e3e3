import type { Portal } from '@userspace-proxy/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IptablesPortalManager } from './portal-manager-iptables.js';
import {
  firstLine,
  hasTool,
  type Netns,
  NetnsSandbox,
  netnsSupport,
  runNode,
  TCP_CLIENT,
  TCP_ECHO_SERVER,
} from './test-support/netns.js';

/**
 * The iptables portal manager against a real kernel, in namespaces this file creates:
 * A (the "node", where the rules and the proxy port live) and B (a client reaching A over a veth,
 * with a route for the Service range 10.96.0.0/16 through A).
 */
const support = netnsSupport(['iptables', 'iptables-save']);
const skip = !support.ok;
const why = skip ? ` (skipped: ${support.reason})` : '';

const svc = { namespace: 'ns', name: 'web', port: 'http' };
const A_IP = '10.201.0.1';
const B_IP = '10.201.0.2';
const base: Portal = {
  service: svc,
  protocol: 'TCP',
  kind: 'cluster-ip',
  ip: '10.96.3.4',
  port: 80,
  proxyIP: '0.0.0.0',
  proxyPort: 40001,
};

/**
 * Our lines of `iptables-save` (chains and rules mentioning KUBE-), normalised across the nft and
 * legacy back ends: counters stripped, every comment quoted.
 */
async function saved(ns: Netns, cmd = 'iptables-save'): Promise<string[]> {
  const out = await ns.exec(cmd, []);
  return out
    .split('\n')
    .filter((l) => l.includes('KUBE-'))
    .map((l) => l.replace(/ \[\d+:\d+\]$/, '').replace(/--comment ([^"\s]+)/, '--comment "$1"'));
}

describe.skipIf(skip)(`IptablesPortalManager in a network namespace${why}`, () => {
  const sandbox = new NetnsSandbox();
  let a: Netns;
  let b: Netns;

  beforeAll(async () => {
    ({ node: a, client: b } = await sandbox.nodeAndClient({
      addressA: `${A_IP}/24`,
      addressB: `${B_IP}/24`,
      serviceRange: '10.96.0.0/16',
    }));
  });
  afterAll(() => sandbox.cleanup());

  const manager = () => new IptablesPortalManager({ runner: a.runner, hostIP: A_IP });

  it('creates the chains and jump rules, installs each portal kind exactly, and removes them', async () => {
    const m = manager();
    const ext: Portal = { ...base, kind: 'external-ip', ip: '203.0.113.7', protocol: 'UDP' };
    const lb: Portal = { ...base, kind: 'load-balancer', ip: '198.51.100.9', proxyIP: A_IP };
    const np: Portal = { ...base, kind: 'node-port', ip: null, port: 30080, proxyPort: 40002 };
    for (const p of [base, ext, lb, np]) await m.open(p);
    const cm = '-m comment --comment "ns/web:http"';
    expect(await saved(a)).toEqual([
      ':KUBE-NODEPORT-NON-LOCAL -',
      '-A INPUT -m comment --comment "Ensure that non-local NodePort traffic can flow" -j KUBE-NODEPORT-NON-LOCAL',
      `-A KUBE-NODEPORT-NON-LOCAL -p tcp ${cm} -m tcp --dport 40002 -m state --state NEW -j ACCEPT`,
      ':KUBE-NODEPORT-CONTAINER -',
      ':KUBE-NODEPORT-HOST -',
      ':KUBE-PORTALS-CONTAINER -',
      ':KUBE-PORTALS-HOST -',
      '-A PREROUTING -m comment --comment "handle ClusterIPs; NOTE: this must be before the NodePort rules" -j KUBE-PORTALS-CONTAINER',
      '-A PREROUTING -m addrtype --dst-type LOCAL -m comment --comment "handle service NodePorts; NOTE: this must be the last rule in the chain" -j KUBE-NODEPORT-CONTAINER',
      '-A OUTPUT -m comment --comment "handle ClusterIPs; NOTE: this must be before the NodePort rules" -j KUBE-PORTALS-HOST',
      '-A OUTPUT -m addrtype --dst-type LOCAL -m comment --comment "handle service NodePorts; NOTE: this must be the last rule in the chain" -j KUBE-NODEPORT-HOST',
      `-A KUBE-NODEPORT-CONTAINER -p tcp ${cm} -m tcp --dport 30080 -j REDIRECT --to-ports 40002`,
      `-A KUBE-NODEPORT-HOST -p tcp ${cm} -m tcp --dport 30080 -j DNAT --to-destination ${A_IP}:40002`,
      `-A KUBE-PORTALS-CONTAINER -d 10.96.3.4/32 -p tcp ${cm} -m tcp --dport 80 -j REDIRECT --to-ports 40001`,
      `-A KUBE-PORTALS-CONTAINER -d 203.0.113.7/32 -p udp ${cm} -m udp --dport 80 -m physdev ! --physdev-is-in -j REDIRECT --to-ports 40001`,
      `-A KUBE-PORTALS-CONTAINER -d 203.0.113.7/32 -p udp ${cm} -m udp --dport 80 -m addrtype --dst-type LOCAL -j REDIRECT --to-ports 40001`,
      `-A KUBE-PORTALS-CONTAINER -d 198.51.100.9/32 -p tcp ${cm} -m tcp --dport 80 -j DNAT --to-destination ${A_IP}:40001`,
      `-A KUBE-PORTALS-HOST -d 10.96.3.4/32 -p tcp ${cm} -m tcp --dport 80 -j DNAT --to-destination ${A_IP}:40001`,
      `-A KUBE-PORTALS-HOST -d 203.0.113.7/32 -p udp ${cm} -m udp --dport 80 -m addrtype --dst-type LOCAL -j DNAT --to-destination ${A_IP}:40001`,
      `-A KUBE-PORTALS-HOST -d 198.51.100.9/32 -p tcp ${cm} -m tcp --dport 80 -j DNAT --to-destination ${A_IP}:40001`,
    ]);

    // Idempotent: opening again adds nothing.
    const all = await saved(a);
    for (const p of [base, ext, lb, np]) await m.open(p);
    expect(await saved(a)).toEqual(all);

    // Closing removes exactly the portal's rules; closing twice is fine.
    await m.close(ext);
    await m.close(ext);
    expect(await saved(a)).toEqual(all.filter((l) => !l.includes('203.0.113.7')));
    for (const p of [base, lb, np]) await m.close(p);
    expect((await saved(a)).filter((l) => l.startsWith('-A KUBE-'))).toEqual([]);

    // A new manager (a restart) flushes what an earlier one left, then cleanup leaves nothing.
    await m.open(base);
    const restarted = manager();
    await restarted.open({ ...base, ip: '10.96.3.5' });
    expect((await saved(a)).filter((l) => l.includes('10.96.3.4'))).toEqual([]);
    await restarted.cleanupLeftovers();
    expect(await saved(a)).toEqual([]);
    await restarted.cleanupLeftovers();
    expect(await saved(a)).toEqual([]);
  });

  it.skipIf(!hasTool('ip6tables-save'))('installs IPv6 portals with ip6tables', async () => {
    const m = new IptablesPortalManager({ runner: a.runner, hostIP: ['fd00:201::1'] });
    await m.open({ ...base, ip: 'fd00:96::4', proxyIP: '::' });
    const cm = '-m comment --comment "ns/web:http"';
    expect((await saved(a, 'ip6tables-save')).filter((l) => l.startsWith('-A KUBE-'))).toEqual([
      `-A KUBE-PORTALS-CONTAINER -d fd00:96::4/128 -p tcp ${cm} -m tcp --dport 80 -j REDIRECT --to-ports 40001`,
      `-A KUBE-PORTALS-HOST -d fd00:96::4/128 -p tcp ${cm} -m tcp --dport 80 -j DNAT --to-destination [fd00:201::1]:40001`,
    ]);
    expect(await saved(a)).toEqual([]);
    await m.cleanupLeftovers();
    expect(await saved(a, 'ip6tables-save')).toEqual([]);
  });

  it('really redirects cluster-IP and node-port traffic to the proxy port', async () => {
    const server = sandbox.spawnNode(a, TCP_ECHO_SERVER, ['0.0.0.0']);
    const proxyPort = Number(await firstLine(server));
    const m = manager();
    const portal: Portal = { ...base, ip: '10.96.7.8', proxyPort };
    const nodePort: Portal = { ...base, kind: 'node-port', ip: null, port: 30123, proxyPort };
    await m.open(portal);
    await m.open(nodePort);
    try {
      // From another host (B), through PREROUTING → KUBE-PORTALS-CONTAINER → REDIRECT.
      expect(await runNode(b, TCP_CLIENT, ['10.96.7.8', '80', 'from-b'])).toBe('echo:from-b');
      // From the node itself, through OUTPUT → KUBE-PORTALS-HOST → DNAT to the host IP.
      await a.exec('ip', ['route', 'add', '10.96.0.0/16', 'via', B_IP]);
      expect(await runNode(a, TCP_CLIENT, ['10.96.7.8', '80', 'from-a'])).toBe('echo:from-a');
      // A node port on the node's address, from B: KUBE-NODEPORT-CONTAINER → REDIRECT.
      expect(await runNode(b, TCP_CLIENT, [A_IP, '30123', 'np'])).toBe('echo:np');
    } finally {
      await m.close(portal);
      await m.close(nodePort);
    }
    // Without the portal, the node port is closed again.
    await expect(runNode(b, TCP_CLIENT, [A_IP, '30123', 'np'])).rejects.toThrow(/ECONNREFUSED/);
    await m.cleanupLeftovers();
  });
});
