import type { Portal } from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import {
  invalidPortalReason,
  isUnspecifiedIP,
  JUMP_RULES,
  OWNED_CHAINS,
  portalFamily,
  portalRules,
  stripPhysdev,
} from './iptables-rules.js';

const portal: Portal = {
  service: { namespace: 'ns', name: 'web', port: '' },
  protocol: 'SCTP',
  kind: 'external-ip',
  ip: '203.0.113.7',
  port: 80,
  proxyIP: '0.0.0.0',
  proxyPort: 40001,
};

describe('iptables rules', () => {
  it('recognises every spelling of the unspecified address', () => {
    for (const ip of ['0.0.0.0', '::', '0:0:0:0:0:0:0:0', '::0'])
      expect(isUnspecifiedIP(ip)).toBe(true);
    for (const ip of ['127.0.0.1', '::1', '10.0.0.0', 'x', ''])
      expect(isUnspecifiedIP(ip)).toBe(false);
  });

  it('takes a node port family from the proxy IP', () => {
    expect(portalFamily({ ...portal, kind: 'node-port', ip: null, proxyIP: '::' })).toBe('IPv6');
    expect(portalFamily({ ...portal, kind: 'node-port', ip: null })).toBe('IPv4');
  });

  it('names an unnamed port "ns/name" and lowercases the protocol', () => {
    const [first] = portalRules(portal, { hostIP: '192.0.2.1', physdev: true });
    expect(first?.args.join(' ')).toBe(
      '-m comment --comment ns/web -p sctp -m sctp --dport 80 -d 203.0.113.7 -m physdev ! --physdev-is-in -j REDIRECT --to-ports 40001',
    );
  });

  it('leaves physdev out when it is unavailable, and strips it from a rule', () => {
    const rules = portalRules(portal, { hostIP: '192.0.2.1', physdev: false });
    expect(rules.some((r) => r.args.includes('physdev'))).toBe(false);
    const [withPhysdev] = portalRules(portal, { hostIP: '192.0.2.1', physdev: true });
    expect(withPhysdev && stripPhysdev(withPhysdev)).toEqual(rules[0]);
    expect(rules[1] && stripPhysdev(rules[1])).toBe(rules[1]);
  });

  it('jumps only to chains it owns, in the tables it owns them in', () => {
    for (const j of JUMP_RULES) {
      expect(OWNED_CHAINS).toContainEqual({ table: j.table, chain: j.target });
      expect(j.args.at(-1)).toBe(j.target);
    }
  });

  it('explains why a portal is invalid', () => {
    expect(invalidPortalReason(portal)).toBeUndefined();
    expect(invalidPortalReason({ ...portal, ip: 'fd00::1', proxyIP: '10.0.0.1' })).toMatch(
      /different families/,
    );
    // REDIRECT to a dual-stack "::" listener works for IPv4 traffic; only DNAT needs one family.
    expect(invalidPortalReason({ ...portal, ip: '10.96.0.1', proxyIP: '::' })).toBeUndefined();
    expect(portalFamily({ ...portal, ip: '10.96.0.1', proxyIP: '::' })).toBe('IPv4');
    expect(invalidPortalReason({ ...portal, kind: 'node-port' })).toMatch(/no IP/);
    const long = 'x'.repeat(200);
    expect(
      invalidPortalReason({ ...portal, service: { namespace: long, name: long, port: '' } }),
    ).toMatch(/longer/);
  });
});
