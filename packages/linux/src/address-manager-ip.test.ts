import { InvalidOptionError } from '@userspace-proxy/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IpAddressManager, parseIpAddrShow } from './address-manager-ip.js';
import type { CommandResult, CommandRunner } from './command-runner.js';
import { CommandError } from './errors.js';
import { type Netns, NetnsSandbox, netnsSupport, runNode } from './test-support/netns.js';

const SHOW = `2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever preferred_lft forever
2: eth0    inet 10.96.0.10/32 scope global eth0\\       valid_lft forever preferred_lft forever
2: eth0    inet6 fd00::10/128 scope global \\       valid_lft forever preferred_lft forever
2: eth0    inet6 fe80::1/64 scope link \\       valid_lft forever preferred_lft forever
`;

/** Answers `ip -o addr show` from a list it keeps, and `ip addr add/del` by changing the list. */
function fakeIp(initial: string[] = []): CommandRunner & { calls: string[]; addrs: string[] } {
  const addrs = [...initial];
  const calls: string[] = [];
  return {
    calls,
    addrs,
    run: async (cmd, args): Promise<CommandResult> => {
      calls.push([cmd, ...args].join(' '));
      const ok = { code: 0, stdout: '', stderr: '' };
      if (args[0] === '-o') {
        const stdout = addrs
          .map((a) => `2: eth0    ${a.includes(':') ? 'inet6' : 'inet'} ${a} scope global eth0\\`)
          .join('\n');
        return { ...ok, stdout };
      }
      const spec = args[2] ?? '';
      if (args[1] === 'add') {
        if (addrs.includes(spec))
          return { code: 2, stdout: '', stderr: 'RTNETLINK answers: File exists' };
        addrs.push(spec);
        return ok;
      }
      const i = addrs.indexOf(spec);
      if (i < 0)
        return {
          code: 2,
          stdout: '',
          stderr: 'RTNETLINK answers: Cannot assign requested address',
        };
      addrs.splice(i, 1);
      return ok;
    },
  };
}

describe('parseIpAddrShow', () => {
  it('finds every address, canonical and without its prefix length', () => {
    expect([...parseIpAddrShow(SHOW)]).toEqual(['10.0.0.5', '10.96.0.10', 'fd00::10', 'fe80::1']);
    expect([...parseIpAddrShow('2: eth0    inet6 FD00:0::0010/128 scope global')]).toEqual([
      'fd00::10',
    ]);
    expect(parseIpAddrShow('garbage\n').size).toBe(0);
  });
});

describe('IpAddressManager (fake ip)', () => {
  it('adds a missing address as /32 or /128 nodad, once', async () => {
    const ip = fakeIp();
    const m = new IpAddressManager({ runner: ip, interface: 'eth0' });
    await m.ensureAddress('10.96.0.10');
    await m.ensureAddress('10.96.0.10');
    await m.ensureAddress('FD00::10');
    expect(ip.calls.filter((c) => !c.includes(' show '))).toEqual([
      'ip addr add 10.96.0.10/32 dev eth0',
      'ip addr add fd00::10/128 dev eth0 nodad',
    ]);
    expect(m.added()).toEqual(['10.96.0.10', 'fd00::10']);
    await m.removeAddress('fd00::10');
    expect(ip.calls.at(-1)).toBe('ip addr del fd00::10/128 dev eth0');
  });

  it('leaves an address it did not add alone', async () => {
    const ip = fakeIp(['10.96.0.10/24']);
    const m = new IpAddressManager({ runner: ip, interface: 'eth0' });
    await m.ensureAddress('10.96.0.10');
    await m.removeAddress('10.96.0.10');
    expect(ip.addrs).toEqual(['10.96.0.10/24']);
    expect(ip.calls.every((c) => c.includes(' show '))).toBe(true);
  });

  it('removes only once, and tolerates an address already gone', async () => {
    const ip = fakeIp();
    const m = new IpAddressManager({ runner: ip, interface: 'eth0' });
    await m.ensureAddress('10.96.0.10');
    ip.addrs.length = 0;
    await m.removeAddress('10.96.0.10');
    await m.removeAddress('10.96.0.10');
    expect(m.added()).toEqual([]);
    expect(ip.calls.filter((c) => c.includes(' del '))).toHaveLength(1);
  });

  it('treats an address added by someone else meanwhile as present but not its own', async () => {
    const ip = fakeIp();
    const racing: CommandRunner = {
      run: async (cmd, args) => {
        if (args[1] === 'add') ip.addrs.push(String(args[2]));
        return ip.run(cmd, args);
      },
    };
    const m = new IpAddressManager({ runner: racing, interface: 'eth0' });
    await m.ensureAddress('10.96.0.10');
    expect(m.added()).toEqual([]);
  });

  it('reports failures as CommandError with the output', async () => {
    const runner: CommandRunner = {
      run: async () => ({ code: 1, stdout: '', stderr: 'Device "eth9" does not exist.' }),
    };
    const m = new IpAddressManager({ runner, interface: 'eth9' });
    const error = await m.ensureAddress('10.96.0.10').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CommandError);
    expect((error as Error).message).toMatch(/ip -o addr show dev eth9 failed.*does not exist/);
    const missing: CommandRunner = { run: async () => ({ code: 127, stdout: '', stderr: '' }) };
    await expect(
      new IpAddressManager({ runner: missing, interface: 'lo' }).ensureAddress('10.96.0.10'),
    ).rejects.toThrow(/install iproute2/);
  });

  it('refuses bad addresses and interface names', async () => {
    const ip = fakeIp();
    const m = new IpAddressManager({ runner: ip, interface: 'eth0' });
    for (const bad of ['', 'x', '10.0.0.1/24', '-h', undefined]) {
      await expect(m.ensureAddress(bad as string)).rejects.toThrow(InvalidOptionError);
      await expect(m.removeAddress(bad as string)).rejects.toThrow(InvalidOptionError);
    }
    expect(ip.calls).toEqual([]);
    for (const iface of ['', 'a very long interface', 'eth0/1', 'a b', undefined]) {
      expect(() => new IpAddressManager({ interface: iface as string })).toThrow(
        InvalidOptionError,
      );
    }
  });
});

const support = netnsSupport();
const why = support.ok ? '' : ` (skipped: ${support.reason})`;

describe.skipIf(!support.ok)(`IpAddressManager in a network namespace${why}`, () => {
  const sandbox = new NetnsSandbox();
  let a: Netns;
  let iface: string;

  beforeAll(async () => {
    a = await sandbox.namespace();
    const b = await sandbox.namespace();
    ({ ifaceA: iface } = await sandbox.link(a, b, {
      addressA: '10.203.0.1/24',
      addressB: '10.203.0.2/24',
    }));
  });
  afterAll(() => sandbox.cleanup());

  const shown = async () => [
    ...parseIpAddrShow(await a.exec('ip', ['-o', 'addr', 'show', 'dev', iface])),
  ];

  /** Binds ip:0 inside the namespace: the proof that the address is usable. */
  const BIND = `require('node:net').createServer().listen(0, process.argv[1], function () { console.log('bound'); this.close(); })`;

  it('adds, binds, and removes an address on a veth, leaving the veth own address', async () => {
    const m = new IpAddressManager({ runner: a.runner, interface: iface });
    await m.ensureAddress('10.96.9.9');
    await m.ensureAddress('10.96.9.9');
    await m.ensureAddress('fd00:96::9');
    await m.ensureAddress('10.203.0.1');
    expect(await shown()).toEqual(
      expect.arrayContaining(['10.203.0.1', '10.96.9.9', 'fd00:96::9']),
    );
    expect(await runNode(a, BIND, ['10.96.9.9'])).toBe('bound\n');
    expect(await runNode(a, BIND, ['fd00:96::9'])).toBe('bound\n');

    for (const ip of ['10.96.9.9', 'fd00:96::9', '10.203.0.1', '10.96.9.9'])
      await m.removeAddress(ip);
    const left = await shown();
    expect(left).toContain('10.203.0.1');
    expect(left).not.toContain('10.96.9.9');
    expect(left).not.toContain('fd00:96::9');
  });
});
