import type { Logger, Portal } from '@userspace-proxy/core';
import { PortalError } from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import { service, useProxierHarness } from '../../core/src/test-support/proxier-harness.js';
import type { CommandResult, CommandRunner } from './command-runner.js';
import { CleanupError } from './errors.js';
import { IptablesPortalManager } from './portal-manager-iptables.js';

/**
 * An in-memory iptables good enough for the commands the manager runs (-N -F -X -C -A -I -D),
 * answering with the real tool's exit codes and messages. `fail` lets a test break one command.
 */
class FakeIptables implements CommandRunner {
  readonly calls: string[] = [];
  readonly tables = new Map<string, Map<string, string[]>>();
  fail: ((cmd: string, args: readonly string[]) => CommandResult | undefined) | undefined;

  constructor(readonly commands: readonly string[] = ['iptables', 'ip6tables']) {
    for (const cmd of commands) {
      for (const [t, chains] of [
        ['nat', ['PREROUTING', 'INPUT', 'OUTPUT', 'POSTROUTING']],
        ['filter', ['INPUT', 'FORWARD', 'OUTPUT']],
      ] as const) {
        this.tables.set(`${cmd} ${t}`, new Map(chains.map((c) => [c, []])));
      }
    }
  }

  chain(cmd: string, table: string, chain: string): string[] | undefined {
    return this.tables.get(`${cmd} ${table}`)?.get(chain);
  }

  async run(cmd: string, args: readonly string[]): Promise<CommandResult> {
    this.calls.push([cmd, ...args].join(' '));
    const injected = this.fail?.(cmd, args);
    if (injected) return injected;
    if (!this.commands.includes(cmd)) return { code: 127, stdout: '', stderr: 'not found' };
    expect(args.slice(0, 3)).toEqual(['-w', '5', '-t']);
    const [table, op, chain, ...rest] = args.slice(3) as [string, string, string, ...string[]];
    const chains = this.tables.get(`${cmd} ${table}`);
    if (!chains) return { code: 3, stdout: '', stderr: 'Table does not exist' };
    const rules = chains.get(chain);
    const ok = { code: 0, stdout: '', stderr: '' };
    const noChain = {
      code: 1,
      stdout: '',
      stderr: 'iptables: No chain/target/match by that name.',
    };
    const badRule = {
      code: 1,
      stdout: '',
      stderr: 'iptables: Bad rule (does a matching rule exist in that chain?).',
    };
    const text = rest.join(' ');
    switch (op) {
      case '-N':
        if (rules) return { code: 1, stdout: '', stderr: 'iptables: Chain already exists.' };
        chains.set(chain, []);
        return ok;
      case '-F':
        if (!rules) return noChain;
        rules.length = 0;
        return ok;
      case '-X':
        if (!rules) return noChain;
        chains.delete(chain);
        return ok;
      case '-C':
        return rules?.includes(text) ? ok : badRule;
      case '-A':
        if (!rules) return noChain;
        rules.push(text);
        return ok;
      case '-I':
        if (!rules) return noChain;
        rules.splice(Number(rest[0]) - 1, 0, rest.slice(1).join(' '));
        return ok;
      case '-D': {
        const i = rules?.indexOf(text) ?? -1;
        if (!rules || i < 0) return rules ? badRule : noChain;
        rules.splice(i, 1);
        return ok;
      }
    }
    throw new Error(`unexpected ${op}`);
  }
}

const svc = { namespace: 'ns', name: 'web', port: 'http' };
const cluster: Portal = {
  service: svc,
  protocol: 'TCP',
  kind: 'cluster-ip',
  ip: '10.96.0.10',
  port: 80,
  proxyIP: '0.0.0.0',
  proxyPort: 40001,
};
const C = '-m comment --comment ns/web:http';

function manager(fake: FakeIptables, extra: Record<string, unknown> = {}) {
  return new IptablesPortalManager({
    runner: fake,
    hostIP: ['192.0.2.5', '2001:db8::5'],
    ...extra,
  });
}

describe('IptablesPortalManager (fake iptables)', () => {
  it('creates its chains and the five jump rules once, at the right positions', async () => {
    const fake = new FakeIptables();
    fake.chain('iptables', 'nat', 'PREROUTING')?.push('-j SOMEONE-ELSE');
    fake.chain('iptables', 'filter', 'INPUT')?.push('-j SOMEONE-ELSE');
    const m = manager(fake);
    await m.open(cluster);
    expect(fake.chain('iptables', 'nat', 'PREROUTING')).toEqual([
      '-m comment --comment handle ClusterIPs; NOTE: this must be before the NodePort rules -j KUBE-PORTALS-CONTAINER',
      '-j SOMEONE-ELSE',
      '-m addrtype --dst-type LOCAL -m comment --comment handle service NodePorts; NOTE: this must be the last rule in the chain -j KUBE-NODEPORT-CONTAINER',
    ]);
    expect(fake.chain('iptables', 'nat', 'OUTPUT')).toHaveLength(2);
    expect(fake.chain('iptables', 'filter', 'INPUT')?.[0]).toBe(
      '-m comment --comment Ensure that non-local NodePort traffic can flow -j KUBE-NODEPORT-NON-LOCAL',
    );
    for (const c of ['KUBE-NODEPORT-CONTAINER', 'KUBE-NODEPORT-HOST']) {
      expect(fake.chain('iptables', 'nat', c)).toEqual([]);
    }
    expect(fake.chain('iptables', 'filter', 'KUBE-NODEPORT-NON-LOCAL')).toEqual([]);
    // IPv6 is not touched until an IPv6 portal is opened.
    expect(fake.chain('ip6tables', 'nat', 'KUBE-PORTALS-CONTAINER')).toBeUndefined();

    const before = fake.calls.length;
    await m.open({ ...cluster, ip: '10.96.0.11' });
    expect(fake.calls.slice(before).filter((c) => / -[NI] /.test(c))).toEqual([]);
  });

  it('flushes stale rules from a previous run on first use, unless told not to', async () => {
    const fake = new FakeIptables();
    fake.tables.get('iptables nat')?.set('KUBE-PORTALS-CONTAINER', ['stale']);
    await manager(fake).open(cluster);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).not.toContain('stale');

    const keep = new FakeIptables();
    keep.tables.get('iptables nat')?.set('KUBE-PORTALS-CONTAINER', ['stale']);
    await manager(keep, { flushOnInit: false }).open(cluster);
    expect(keep.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')?.[0]).toBe('stale');
  });

  it('installs a cluster-IP portal: REDIRECT from containers, DNAT to the host IP from the host', async () => {
    const fake = new FakeIptables();
    await manager(fake).open(cluster);
    const match = `${C} -p tcp -m tcp --dport 80 -d 10.96.0.10`;
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toEqual([
      `${match} -j REDIRECT --to-ports 40001`,
    ]);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-HOST')).toEqual([
      `${match} -j DNAT --to-destination 192.0.2.5:40001`,
    ]);
  });

  it('DNATs to the proxy IP when the proxy listens on one address', async () => {
    const fake = new FakeIptables();
    await manager(fake).open({ ...cluster, kind: 'load-balancer', proxyIP: '192.0.2.9' });
    const match = `${C} -p tcp -m tcp --dport 80 -d 10.96.0.10`;
    const target = '-j DNAT --to-destination 192.0.2.9:40001';
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toEqual([`${match} ${target}`]);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-HOST')).toEqual([`${match} ${target}`]);
  });

  it('installs the three external-IP rules', async () => {
    const fake = new FakeIptables();
    await manager(fake).open({
      ...cluster,
      kind: 'external-ip',
      ip: '203.0.113.7',
      protocol: 'UDP',
    });
    const match = `${C} -p udp -m udp --dport 80 -d 203.0.113.7`;
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toEqual([
      `${match} -m physdev ! --physdev-is-in -j REDIRECT --to-ports 40001`,
      `${match} -m addrtype --dst-type LOCAL -j REDIRECT --to-ports 40001`,
    ]);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-HOST')).toEqual([
      `${match} -m addrtype --dst-type LOCAL -j DNAT --to-destination 192.0.2.5:40001`,
    ]);
  });

  it('installs the three node-port rules; the filter rule matches the proxy port', async () => {
    const fake = new FakeIptables();
    const np: Portal = { ...cluster, kind: 'node-port', ip: null, port: 30080 };
    await manager(fake).open(np);
    const match = `${C} -p tcp -m tcp --dport 30080`;
    expect(fake.chain('iptables', 'nat', 'KUBE-NODEPORT-CONTAINER')).toEqual([
      `${match} -j REDIRECT --to-ports 40001`,
    ]);
    expect(fake.chain('iptables', 'nat', 'KUBE-NODEPORT-HOST')).toEqual([
      `${match} -j DNAT --to-destination 192.0.2.5:40001`,
    ]);
    expect(fake.chain('iptables', 'filter', 'KUBE-NODEPORT-NON-LOCAL')).toEqual([
      `${C} -p tcp -m tcp --dport 40001 -m state --state NEW -j ACCEPT`,
    ]);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toEqual([]);
  });

  it('uses ip6tables and bracketed DNAT targets for IPv6 portals', async () => {
    const fake = new FakeIptables();
    await manager(fake).open({ ...cluster, ip: 'fd00::10', proxyIP: '::' });
    expect(fake.chain('ip6tables', 'nat', 'KUBE-PORTALS-HOST')).toEqual([
      `${C} -p tcp -m tcp --dport 80 -d fd00::10 -j DNAT --to-destination [2001:db8::5]:40001`,
    ]);
    expect(fake.chain('ip6tables', 'nat', 'KUBE-PORTALS-CONTAINER')?.[0]).toMatch(/REDIRECT/);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toBeUndefined();
  });

  it('closes exactly what it opened, and both are idempotent', async () => {
    const fake = new FakeIptables();
    const m = manager(fake);
    const other = { ...cluster, ip: '10.96.0.99' };
    await m.open(other);
    const snapshot = () => JSON.stringify([...fake.tables].map(([k, v]) => [k, [...v]]));
    const withOther = snapshot();
    await m.open(cluster);
    await m.open(cluster);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toHaveLength(2);
    await m.close(cluster);
    expect(snapshot()).toBe(withOther);
    await m.close(cluster);
    expect(snapshot()).toBe(withOther);
  });

  it('closes with the rules it opened even if the host IP changed since', async () => {
    const fake = new FakeIptables();
    let address = '192.0.2.20';
    const m = new IptablesPortalManager({
      runner: fake,
      networkInterfaces: () => ({
        lo: [{ address: '127.0.0.1', family: 'IPv4', internal: true } as never],
        eth0: [{ address, family: 'IPv4', internal: false } as never],
      }),
    });
    await m.open(cluster);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-HOST')?.[0]).toContain('192.0.2.20:40001');
    address = '192.0.2.21';
    await m.close(cluster);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-HOST')).toEqual([]);
  });

  it('refuses to guess a host IP it cannot find', async () => {
    const fake = new FakeIptables();
    const m = new IptablesPortalManager({ runner: fake, networkInterfaces: () => ({}) });
    await expect(m.open(cluster)).rejects.toThrow(/no IPv4 address found.*pass hostIP/);
  });

  it('rolls back a half-opened portal and reports the command output', async () => {
    const fake = new FakeIptables();
    const m = manager(fake);
    fake.fail = (_cmd, args) =>
      args.includes('-A') && args.includes('KUBE-PORTALS-HOST')
        ? { code: 4, stdout: '', stderr: 'iptables: Resource temporarily unavailable.' }
        : undefined;
    const error = await m.open(cluster).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PortalError);
    expect((error as PortalError).code).toBe('ERR_PORTAL');
    expect((error as Error).message).toMatch(/ns\/web:http.*Resource temporarily unavailable/s);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toEqual([]);
    fake.fail = undefined;
    await m.open(cluster);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-HOST')).toHaveLength(1);
  });

  it('retries chain creation after a failed first attempt', async () => {
    const fake = new FakeIptables();
    const m = manager(fake);
    fake.fail = (_c, args) =>
      args.includes('-N') ? { code: 4, stdout: '', stderr: 'boom' } : undefined;
    await expect(m.open(cluster)).rejects.toThrow(/boom/);
    fake.fail = undefined;
    await m.open(cluster);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toHaveLength(1);
  });

  it('leaves physdev out, with one warning, when iptables cannot load it', async () => {
    const fake = new FakeIptables();
    const warnings: unknown[] = [];
    const logger = {
      warn: (...a: unknown[]) => warnings.push(a),
      getSubLogger: () => logger,
    } as unknown as Logger;
    for (const k of ['silly', 'trace', 'debug', 'info', 'error', 'fatal']) {
      (logger as unknown as Record<string, () => void>)[k] = () => undefined;
    }
    const m = manager(fake, { logger });
    fake.fail = (_c, args) =>
      args.includes('physdev')
        ? { code: 2, stdout: '', stderr: "iptables v1.8.9: Couldn't load match `physdev'" }
        : undefined;
    const ext: Portal = { ...cluster, kind: 'external-ip', ip: '203.0.113.7' };
    await m.open(ext);
    await m.open({ ...ext, ip: '203.0.113.8' });
    const rules = fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER') ?? [];
    expect(rules).toHaveLength(4);
    expect(rules[0]).toBe(
      `${C} -p tcp -m tcp --dport 80 -d 203.0.113.7 -j REDIRECT --to-ports 40001`,
    );
    expect(warnings).toHaveLength(1);
    await m.close(ext);
    await m.close({ ...ext, ip: '203.0.113.8' });
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toEqual([]);
  });

  it('does not fall back when physdev is required', async () => {
    const fake = new FakeIptables();
    fake.fail = (_c, args) =>
      args.includes('physdev')
        ? { code: 2, stdout: '', stderr: "Couldn't load match `physdev'" }
        : undefined;
    const m = manager(fake, { physdev: true });
    await expect(m.open({ ...cluster, kind: 'external-ip' })).rejects.toThrow(PortalError);
  });

  it('refuses malformed portals without running anything', async () => {
    const fake = new FakeIptables();
    const m = manager(fake);
    const bad: unknown[] = [
      { ...cluster, port: 0 },
      { ...cluster, port: 70000 },
      { ...cluster, proxyPort: 1.5 },
      { ...cluster, ip: 'not-an-ip' },
      { ...cluster, ip: null },
      { ...cluster, kind: 'node-port' },
      { ...cluster, proxyIP: 'fd00::1' },
      { ...cluster, protocol: 'ICMP' },
      { ...cluster, kind: 'weird' },
      { ...cluster, service: { namespace: 'ns', name: 'a\nb', port: '' } },
      { ...cluster, service: null },
      null,
    ];
    for (const p of bad) {
      await expect(m.open(p as Portal)).rejects.toThrow(PortalError);
      await expect(m.close(p as Portal)).rejects.toThrow(PortalError);
    }
    expect(fake.calls).toEqual([]);
  });

  it('serialises concurrent opens so a rule is added once', async () => {
    const fake = new FakeIptables();
    const m = manager(fake);
    await Promise.all([m.open(cluster), m.open(cluster), m.open(cluster)]);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toHaveLength(1);
    expect(fake.chain('iptables', 'nat', 'PREROUTING')).toHaveLength(2);
  });

  it('cleans up duplicated jump rules and every chain, and can start again', async () => {
    const fake = new FakeIptables();
    const m = manager(fake);
    await m.open(cluster);
    await m.open({ ...cluster, ip: 'fd00::1', proxyIP: '::' });
    const pre = fake.chain('iptables', 'nat', 'PREROUTING') ?? [];
    pre.push(pre[0] ?? '');
    await m.cleanupLeftovers();
    for (const cmd of ['iptables', 'ip6tables']) {
      for (const [key, chains] of fake.tables) {
        if (!key.startsWith(`${cmd} `)) continue;
        expect([...chains.keys()].filter((c) => c.startsWith('KUBE-'))).toEqual([]);
        for (const rules of chains.values()) expect(rules).toEqual([]);
      }
    }
    await m.cleanupLeftovers();
    await m.open(cluster);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toHaveLength(1);
  });

  it('ignores a missing ip6tables in cleanup but reports real failures after doing the rest', async () => {
    const fake = new FakeIptables(['iptables']);
    const m = manager(fake);
    await m.open(cluster);
    fake.fail = (cmd, args) =>
      cmd === 'iptables' && args.includes('-F') && args.includes('KUBE-PORTALS-HOST')
        ? { code: 4, stdout: '', stderr: 'permission denied (you must be root)' }
        : undefined;
    const error = await m.cleanupLeftovers().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CleanupError);
    expect((error as CleanupError).code).toBe('ERR_CLEANUP');
    expect((error as Error).message).toMatch(/permission denied/);
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toBeUndefined();
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-HOST')).toBeDefined();
    expect(fake.chain('iptables', 'filter', 'KUBE-NODEPORT-NON-LOCAL')).toBeUndefined();
  });

  it('uses the commands it is given', async () => {
    const fake = new FakeIptables(['iptables-legacy']);
    await manager(fake, { iptablesCommand: 'iptables-legacy' }).open(cluster);
    expect(fake.chain('iptables-legacy', 'nat', 'KUBE-PORTALS-CONTAINER')).toHaveLength(1);
    expect(() => manager(fake, { lockWaitSeconds: -1 })).toThrow(/lockWaitSeconds/);
  });
});

describe('redirect mode with the iptables PortalManager (fake iptables)', () => {
  const start = useProxierHarness();

  it('points the load-balancer IP rules of a Service with source ranges at their own proxy port', async () => {
    const fake = new FakeIptables();
    const h = await start({ mode: 'redirect', listenIP: '0.0.0.0', portals: manager(fake) });
    const s = service(
      'web',
      { type: 'LoadBalancer', loadBalancerSourceRanges: ['203.0.113.0/24'] },
      { status: { loadBalancer: { ingress: [{ ip: '198.51.100.7' }] } } },
    );
    await h.synced(() => h.proxier.onServiceAdd(s));
    const rules = fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER') ?? [];
    const to = (ip: string) =>
      rules.filter((r) => r.includes(`-d ${ip}`)).map((r) => r.split(' -j ')[1]);
    // The fake sockets bind 40000 (the cluster IP's proxy port) and 40001 (the load-balancer IPs').
    expect(to('10.0.0.1')).toEqual(['REDIRECT --to-ports 40000']);
    expect(to('198.51.100.7')).toEqual(['REDIRECT --to-ports 40001']);
    const [, lbSocket] = h.sockets.open();
    expect(lbSocket?.context?.allowedSources).toEqual(['203.0.113.0/24']);
    await h.synced(() => h.proxier.onServiceDelete(s));
    expect(fake.chain('iptables', 'nat', 'KUBE-PORTALS-CONTAINER')).toEqual([]);
  });
});
