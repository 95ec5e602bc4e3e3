import { describe, expect, it } from 'vitest';
import { type CliResult, parseCommandLine } from './cli.js';
import { VERSION } from './version.js';

function run(argv: string[]) {
  const r = parseCommandLine(argv);
  if (r.kind !== 'run') throw new Error(`expected options, got exit ${r.code}: ${r.stderr}`);
  return r.options;
}

function exit(argv: string[]): Extract<CliResult, { kind: 'exit' }> {
  const r = parseCommandLine(argv);
  if (r.kind !== 'exit') throw new Error('expected an exit');
  return r;
}

describe('parseCommandLine', () => {
  it('prints the version', () => {
    expect(exit(['--version'])).toEqual({
      kind: 'exit',
      code: 0,
      stdout: `userspace-proxy v${VERSION}\n`,
      stderr: '',
    });
  });

  it('explains every flag in --help, with kube-proxy defaults', () => {
    const help = exit(['--help']);
    expect(help.code).toBe(0);
    for (const flag of [
      '--config',
      '--write-config-to',
      '--cleanup',
      '--bind-address',
      '--healthz-bind-address',
      '--metrics-bind-address',
      '--bind-address-hard-fail',
      '--proxy-mode',
      '--proxy-port-range',
      '--udp-timeout',
      '--sync-period',
      '--iptables-sync-period',
      '--min-sync-period',
      '--iptables-min-sync-period',
      '--config-sync-period',
      '--nodeport-addresses',
      '--hostname-override',
      '--kubeconfig',
      '--master',
      '-v, --v',
      '--logging-format',
      '--services-file',
      '--drain-timeout',
      '--max-connections-per-port',
      '--max-udp-sessions-per-port',
      '--tcp-idle-timeout',
    ]) {
      expect(help.stdout).toContain(`  ${flag}`);
    }
    const compact = help.stdout.replace(/\s+/g, ' ');
    for (const shown of [
      '(default 0.0.0.0:10256)',
      '(default 127.0.0.1:10249)',
      '(default 30s)',
      '(default 1s)',
      '(default 15m0s)',
      '(default 10s)',
      '(default 25s)',
    ]) {
      expect(compact).toContain(shown);
    }
  });

  it('maps flags to configuration fields, keeping only those given', () => {
    const o = run([
      '--bind-address=10.0.0.5',
      '--healthz-bind-address',
      '127.0.0.1',
      '--metrics-bind-address',
      '[::1]:9000',
      '--bind-address-hard-fail',
      '--proxy-mode',
      'userspace',
      '--proxy-port-range',
      '30000-30100',
      '--udp-timeout',
      '1s',
      '--iptables-sync-period',
      '45s',
      '--min-sync-period=0',
      '--config-sync-period',
      '1m',
      '--nodeport-addresses',
      '10.0.0.0/8,primary',
      '--nodeport-addresses=localhost',
      '--hostname-override',
      'Node-1',
      '--kubeconfig',
      '/k',
      '--master',
      'https://api:6443',
      '--v=3',
      '--logging-format',
      'json',
      '--services-file',
      'svc.yaml',
      '--drain-timeout',
      '5s',
      '--max-connections-per-port',
      '100',
      '--max-udp-sessions-per-port',
      '50',
      '--tcp-idle-timeout',
      '1h',
    ]);
    expect(o.flags).toEqual({
      bindAddress: '10.0.0.5',
      healthzBindAddress: '127.0.0.1:10256',
      metricsBindAddress: '[::1]:9000',
      bindAddressHardFail: true,
      mode: 'userspace',
      portRange: '30000-30100',
      udpIdleTimeout: 1000,
      iptables: { syncPeriod: 45_000, minSyncPeriod: 0 },
      configSyncPeriod: 60_000,
      nodePortAddresses: ['10.0.0.0/8', 'primary', 'localhost'],
      hostnameOverride: 'Node-1',
      clientConnection: { kubeconfig: '/k' },
      logging: { verbosity: 3, format: 'json' },
      userspaceProxy: {
        servicesFile: 'svc.yaml',
        drainTimeout: 5000,
        maxConnectionsPerPort: 100,
        maxUdpSessionsPerPort: 50,
        tcpIdleTimeout: 3_600_000,
      },
    });
    expect(o.master).toBe('https://api:6443');
    expect(o.explicit.has('iptables-sync-period')).toBe(true);
    expect(o.explicit.has('config')).toBe(false);
  });

  it('returns the action flags', () => {
    expect(run(['--cleanup'])).toMatchObject({ cleanup: true, configFile: '', writeConfigTo: '' });
    expect(
      run(['--cleanup=false', '--config', 'c.yaml', '--write-config-to', 'out.yaml']),
    ).toMatchObject({
      cleanup: false,
      configFile: 'c.yaml',
      writeConfigTo: 'out.yaml',
    });
    expect(run([]).flags).toEqual({});
  });

  it('reports every bad flag value at once, in pflag form', () => {
    const r = exit([
      '--bind-address',
      '1.2.3',
      '--udp-timeout',
      '5',
      '--healthz-bind-address',
      'host:80',
      '--metrics-bind-address',
      '127.0.0.1:http',
      '--bind-address-hard-fail=maybe',
      '--max-connections-per-port',
      'lots',
      '--logging-format',
      'xml',
      '-v',
      '-1',
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr.split('\n')).toEqual([
      'Error: invalid argument "1.2.3" for "--bind-address" flag: "1.2.3" is not a valid IP address',
      'Error: invalid argument "host:80" for "--healthz-bind-address" flag: "host" is not a valid IP address',
      'Error: invalid argument "127.0.0.1:http" for "--metrics-bind-address" flag: "http" is not a valid number',
      'Error: invalid argument "maybe" for "--bind-address-hard-fail" flag: strconv.ParseBool: parsing "maybe": invalid syntax',
      'Error: invalid argument "5" for "--udp-timeout" flag: time: missing unit in duration "5"',
      'Error: invalid argument "-1" for "--v" flag: must be 0 or more',
      'Error: invalid argument "xml" for "--logging-format" flag: unsupported log format "xml": use text or json',
      'Error: invalid argument "lots" for "--max-connections-per-port" flag: strconv.ParseInt: parsing "lots": invalid syntax',
      "Run 'userspace-proxy --help' for usage.",
      '',
    ]);
  });

  it('reports an ip:port flag that is not in either form', () => {
    expect(exit(['--healthz-bind-address', 'a:b:c']).stderr).toContain(
      '"a:b:c" is not in a valid format (ip or ip:port)',
    );
    // An IPv6 literal is an IP, so it gets the default port, as pflag's IPPort does.
    expect(run(['--healthz-bind-address', '::1:80']).flags.healthzBindAddress).toBe(
      '[::1:80]:10256',
    );
  });

  it('refuses positional arguments as kube-proxy does', () => {
    expect(exit(['run', 'now']).stderr).toContain(
      'Error: "userspace-proxy" does not take any arguments, got ["run" "now"]',
    );
  });

  it('refuses unknown flags', () => {
    const r = exit(['--iptables-masquerade-bit', '14']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("unknown option '--iptables-masquerade-bit'");
  });

  it('reports every unknown flag and bad value in one run', () => {
    const r = exit(['--bogus', '1', '--udp-timeout', 'soon', '-x', '--other=2', 'stray']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      [
        "Error: unknown option '--bogus'",
        "Error: unknown option '-x'",
        "Error: unknown option '--other'",
        'Error: "userspace-proxy" does not take any arguments, got ["stray"]',
        'Error: invalid argument "soon" for "--udp-timeout" flag: time: invalid duration "soon"',
        "Run 'userspace-proxy --help' for usage.",
        '',
      ].join('\n'),
    );
  });
});
