import type { Protocol } from '@userspace-proxy/core';
import { ConntrackError } from '@userspace-proxy/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CommandResult, CommandRunner } from './command-runner.js';
import { ExecConntrackCleaner } from './conntrack-exec.js';
import { CommandError } from './errors.js';
import { IptablesPortalManager } from './portal-manager-iptables.js';
import {
  type Netns,
  NetnsSandbox,
  netnsSupport,
  runNode,
  UDP_SENDER,
} from './test-support/netns.js';

function fakeRunner(answer: CommandResult | Error): CommandRunner & { calls: string[][] } {
  const calls: string[][] = [];
  return {
    calls,
    run: async (cmd, args) => {
      calls.push([cmd, ...args]);
      if (answer instanceof Error) throw answer;
      return answer;
    },
  };
}

describe('ExecConntrackCleaner (fake runner)', () => {
  it('runs conntrack -D for the address and protocol, with -f ipv6 for IPv6', async () => {
    const runner = fakeRunner({ code: 0, stdout: '', stderr: '1 flow entries have been deleted.' });
    const cleaner = new ExecConntrackCleaner({ runner });
    await cleaner.clearEntriesForIP('10.96.0.10', 'UDP');
    await cleaner.clearEntriesForIP('fd00::10', 'UDP');
    await cleaner.clearEntriesForIP('10.96.0.11', 'SCTP');
    expect(runner.calls).toEqual([
      ['conntrack', '-D', '--orig-dst', '10.96.0.10', '-p', 'udp'],
      ['conntrack', '-D', '--orig-dst', 'fd00::10', '-p', 'udp', '-f', 'ipv6'],
      ['conntrack', '-D', '--orig-dst', '10.96.0.11', '-p', 'sctp'],
    ]);
  });

  it('treats "0 flow entries have been deleted" (exit 1) as success', async () => {
    const runner = fakeRunner({
      code: 1,
      stdout: '',
      stderr: 'conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted.\n',
    });
    await expect(
      new ExecConntrackCleaner({ runner }).clearEntriesForIP('10.96.0.10', 'UDP'),
    ).resolves.toBeUndefined();
  });

  it('says to install conntrack when the program is missing', async () => {
    for (const answer of [
      { code: 127, stdout: '', stderr: 'conntrack: command not found' },
      { code: 255, stdout: '', stderr: 'exec of "conntrack" failed: No such file or directory' },
      Object.assign(new Error('spawn conntrack ENOENT'), { code: 'ENOENT' }),
    ]) {
      const cleaner = new ExecConntrackCleaner({ runner: fakeRunner(answer) });
      const error = await cleaner.clearEntriesForIP('10.96.0.10', 'UDP').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ConntrackError);
      expect((error as ConntrackError).code).toBe('ERR_CONNTRACK');
      expect((error as Error).message).toMatch(/10\.96\.0\.10.*install conntrack/);
    }
  });

  it('wraps any other failure with the output as a CommandError cause', async () => {
    const runner = fakeRunner({
      code: 1,
      stdout: '',
      stderr: 'conntrack v1.4.7: Operation failed: Operation not permitted',
    });
    const error = await new ExecConntrackCleaner({ runner })
      .clearEntriesForIP('10.96.0.10', 'UDP')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConntrackError);
    expect((error as Error).message).not.toMatch(/install/);
    const cause = (error as Error).cause;
    expect(cause).toBeInstanceOf(CommandError);
    expect((cause as CommandError).output).toMatch(/Operation not permitted/);
    expect((cause as Error).message).toMatch(/conntrack -D --orig-dst 10\.96\.0\.10 -p udp/);
  });

  it('does not mistake "10 flow entries" in a failure for "0 flow entries"', async () => {
    const runner = fakeRunner({
      code: 1,
      stdout: '',
      stderr: '10 flow entries have been deleted; then EIO',
    });
    await expect(
      new ExecConntrackCleaner({ runner }).clearEntriesForIP('10.96.0.10', 'UDP'),
    ).rejects.toThrow(ConntrackError);
  });

  it('wraps a runner that could not run the command', async () => {
    const runner = fakeRunner(new CommandError('conntrack', 'timed out after 30000 ms'));
    await expect(
      new ExecConntrackCleaner({ runner }).clearEntriesForIP('10.96.0.10', 'UDP'),
    ).rejects.toThrow(ConntrackError);
  });

  it('refuses a malformed address or protocol without running anything', async () => {
    const runner = fakeRunner({ code: 0, stdout: '', stderr: '' });
    const cleaner = new ExecConntrackCleaner({ runner });
    for (const [ip, proto] of [
      ['not-an-ip', 'UDP'],
      ['10.0.0.1; rm -rf /', 'UDP'],
      ['-h', 'UDP'],
      [undefined, 'UDP'],
      ['10.0.0.1', 'ICMP'],
    ]) {
      await expect(cleaner.clearEntriesForIP(ip as string, proto as Protocol)).rejects.toThrow(
        ConntrackError,
      );
    }
    expect(runner.calls).toEqual([]);
  });
});

const support = netnsSupport(['conntrack', 'iptables']);
const why = support.ok ? '' : ` (skipped: ${support.reason})`;

describe.skipIf(!support.ok)(`ExecConntrackCleaner in a network namespace${why}`, () => {
  const sandbox = new NetnsSandbox();
  let a: Netns;
  let b: Netns;

  beforeAll(async () => {
    ({ node: a, client: b } = await sandbox.nodeAndClient({
      addressA: '10.202.0.1/24',
      addressB: '10.202.0.2/24',
      serviceRange: '10.96.0.0/16',
    }));
  });
  afterAll(() => sandbox.cleanup());

  async function listed(ns: Netns, ip: string, family: string[] = []): Promise<string> {
    const r = await ns.runner.run('conntrack', ['-L', '--orig-dst', ip, ...family]);
    return `${r.stdout}`;
  }

  it('clears the entries a real UDP flow through a portal left, and only those', async () => {
    const portals = new IptablesPortalManager({ runner: a.runner, hostIP: '10.202.0.1' });
    const portal = {
      service: { namespace: 'ns', name: 'dns', port: 'dns' },
      protocol: 'UDP' as const,
      kind: 'cluster-ip' as const,
      ip: '10.96.5.5',
      port: 53,
      proxyIP: '0.0.0.0',
      proxyPort: 40053,
    };
    // Two Services: the kernel confirms (keeps) a flow only when a rule sends it to a local port.
    await portals.open(portal);
    await portals.open({
      ...portal,
      service: { ...portal.service, name: 'dns2' },
      ip: '10.96.5.6',
    });
    await runNode(b, UDP_SENDER, ['10.202.0.2', '40000', '10.96.5.5', '53']);
    await runNode(b, UDP_SENDER, ['10.202.0.2', '40001', '10.96.5.6', '53']);
    const deadline = Date.now() + 10_000;
    const seen = async () =>
      (await listed(a, '10.96.5.5')).includes('dst=10.96.5.5') &&
      (await listed(a, '10.96.5.6')).includes('dst=10.96.5.6');
    while (!(await seen()) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(await listed(a, '10.96.5.5')).toMatch(
      /src=10\.202\.0\.2 dst=10\.96\.5\.5 sport=40000 dport=53/,
    );

    const cleaner = new ExecConntrackCleaner({ runner: a.runner });
    await cleaner.clearEntriesForIP('10.96.5.5', 'UDP');
    expect(await listed(a, '10.96.5.5')).not.toMatch(/dst=10\.96\.5\.5/);
    // Another Service address keeps its flow.
    expect(await listed(a, '10.96.5.6')).toMatch(/dst=10\.96\.5\.6/);
    // Nothing left to delete is success.
    await cleaner.clearEntriesForIP('10.96.5.5', 'UDP');
    await portals.cleanupLeftovers();
  });

  it('clears IPv6 entries', async () => {
    await a.exec('conntrack', [
      '-I',
      '-p',
      'udp',
      '-s',
      'fd00::2',
      '-d',
      'fd00:96::5',
      '--sport',
      '40000',
      '--dport',
      '53',
      '--timeout',
      '120',
    ]);
    expect(await listed(a, 'fd00:96::5', ['-f', 'ipv6'])).toMatch(/dst=fd00:96::5/);
    await new ExecConntrackCleaner({ runner: a.runner }).clearEntriesForIP('fd00:96::5', 'UDP');
    expect(await listed(a, 'fd00:96::5', ['-f', 'ipv6'])).not.toMatch(/dst=fd00:96::5/);
  });

  it('reports a missing binary inside the namespace with the install hint', async () => {
    const cleaner = new ExecConntrackCleaner({
      runner: a.runner,
      conntrackCommand: 'conntrack-missing-on-purpose',
    });
    await expect(cleaner.clearEntriesForIP('10.96.5.5', 'UDP')).rejects.toThrow(
      /install conntrack/,
    );
  });
});
