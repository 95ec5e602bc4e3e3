import { describe, expect, it, vi } from 'vitest';
import { parseCommandLine } from './cli.js';
import { decodeConfiguration, resolveConfiguration } from './config-load.js';
import { defaultConfiguration } from './config-schema.js';
import { configurationYaml } from './config-write.js';

const HEADER = 'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n';

/** Resolves flags (and a file whose text is `file`) as runCommand does. */
async function resolveWith(argv: string[], file?: string) {
  const parsed = parseCommandLine(
    file === undefined ? argv : ['--config', '/etc/up/config.yaml', ...argv],
  );
  if (parsed.kind !== 'run') throw new Error(parsed.stderr);
  const { configFile, flags, explicit, configFlags } = parsed.options;
  return resolveConfiguration({
    configFile,
    flags,
    explicit,
    configFlags,
    read: async () => file ?? '',
  });
}

describe('decodeConfiguration', () => {
  it("warns through its result, not the YAML library's stderr, of a key that is a map", () => {
    const emit = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    try {
      const text =
        'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n{a: 1}: 2\n';
      const result = decodeConfiguration(text);
      expect(emit).not.toHaveBeenCalled();
      expect(result.warnings[0]).toContain(
        'the configuration: a key that is a map or a list (line 3) is used as its YAML text',
      );
    } finally {
      emit.mockRestore();
    }
  });

  it('decodes YAML with Go durations, and applies kube-proxy defaults', () => {
    const r = decodeConfiguration(`${HEADER}iptables:\n  syncPeriod: 1m\nudpIdleTimeout: 5s\n`);
    expect(r.errors).toEqual([]);
    const config = defaultConfiguration(r.input);
    expect(config.iptables.syncPeriod).toBe(60_000);
    expect(config.iptables.minSyncPeriod).toBe(1000);
    expect(config.udpIdleTimeout).toBe(5000);
    expect(config.healthzBindAddress).toBe('0.0.0.0:10256');
    expect(config.metricsBindAddress).toBe('127.0.0.1:10249');
  });

  it('decodes JSON too', () => {
    const r = decodeConfiguration(
      JSON.stringify({
        apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
        kind: 'KubeProxyConfiguration',
        mode: 'userspace',
      }),
    );
    expect(r.input?.mode).toBe('userspace');
  });

  it('re-defaults empty addresses and zero periods, and appends default ports to bare IPs', () => {
    const r = decodeConfiguration(
      `${HEADER}bindAddress: "::"\nhealthzBindAddress: ""\nmetricsBindAddress: ""\nconfigSyncPeriod: 0s\n`,
    );
    const config = defaultConfiguration(r.input);
    expect(config.healthzBindAddress).toBe('[::]:10256');
    expect(config.metricsBindAddress).toBe('[::1]:10249');
    expect(config.configSyncPeriod).toBe(900_000);
    const bare = defaultConfiguration(
      decodeConfiguration(`${HEADER}healthzBindAddress: 10.0.0.1\nmetricsBindAddress: "::1"\n`)
        .input,
    );
    expect(bare.healthzBindAddress).toBe('10.0.0.1:10256');
    expect(bare.metricsBindAddress).toBe('[::1]:10249');
  });

  it('warns about unknown fields and keeps the rest', () => {
    const r = decodeConfiguration(`${HEADER}mode: userspace\nfoo: 1\niptables:\n  bar: true\n`);
    expect(r.errors).toEqual([]);
    expect(r.warnings).toEqual([
      'unknown field "iptables.bar" is ignored',
      'unknown field "foo" is ignored',
    ]);
    expect(r.input?.mode).toBe('userspace');
  });

  it('reports every wrongly typed field at once and still decodes the others', () => {
    const r = decodeConfiguration(
      `${HEADER}bindAddressHardFail: "yes"\nudpIdleTimeout: 5\niptables:\n  syncPeriod: soon\nuserspaceProxy:\n  dialTimeouts: [1s, x]\nmode: userspace\n`,
    );
    expect(r.errors).toEqual([
      'failed to decode: bindAddressHardFail: Invalid input: expected boolean, received string',
      'failed to decode: iptables.syncPeriod: time: invalid duration "soon"',
      'failed to decode: udpIdleTimeout: Invalid input: expected string, received number',
      'failed to decode: userspaceProxy.dialTimeouts[1]: time: invalid duration "x"',
    ]);
    expect(r.input?.mode).toBe('userspace');
  });

  it.each([
    ['mode: [', /^failed to decode: /],
    ['- a\n- b\n', /^failed to decode: expected a KubeProxyConfiguration object, got a list$/],
    ['mode: userspace\n', /^failed to decode: apiVersion and kind must be set/],
    [
      'apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n',
      /^got unexpected config type: kubeproxy.config.k8s.io\/v1alpha2, Kind=KubeProxyConfiguration$/,
    ],
    [`${HEADER}---\n${HEADER}`, /exactly one KubeProxyConfiguration is expected/],
  ])('refuses %j', (text, message) => {
    const r = decodeConfiguration(text);
    expect(r.input).toBeUndefined();
    expect(r.errors[0]).toMatch(message);
  });

  it('round-trips what --write-config-to writes', () => {
    const config = defaultConfiguration();
    config.iptables.syncPeriod = 90_000;
    config.userspaceProxy.dialTimeouts = [100, 2500];
    config.userspaceProxy.nodeWaitTimeout = 5000;
    const r = decodeConfiguration(configurationYaml(config));
    expect(r.errors).toEqual([]);
    expect(r.warnings).toEqual([]);
    expect(defaultConfiguration(r.input)).toEqual(config);
  });
});

describe('resolveConfiguration', () => {
  it('uses the flags when there is no file, without re-defaulting zeros', async () => {
    const r = await resolveWith([
      '--min-sync-period',
      '0',
      '--proxy-mode',
      'userspace',
      '--services-file',
      's.yaml',
    ]);
    expect(r.errors).toEqual([]);
    expect(r.config?.iptables.minSyncPeriod).toBe(0);
    expect(r.config?.mode).toBe('userspace');
    expect(r.config?.userspaceProxy.servicesFile).toBe('s.yaml');
  });

  it('takes --sctp-transport udp-helper (flag and file) and refuses an unknown transport', async () => {
    const flag = await resolveWith(['--sctp-transport', 'udp-helper']);
    expect(flag.errors).toEqual([]);
    expect(flag.config?.userspaceProxy.sctpTransport).toBe('udp-helper');
    const file = decodeConfiguration(`${HEADER}userspaceProxy:\n  sctpTransport: udp-helper\n`);
    expect(file.errors).toEqual([]);
    const bad = decodeConfiguration(`${HEADER}userspaceProxy:\n  sctpTransport: tcp\n`);
    expect(bad.errors.join('\n')).toMatch(/sctpTransport/);
    expect((await resolveWith([])).config?.userspaceProxy.sctpTransport).toBe('udp');
  });

  it('lets the file replace flags, except the hostname and logging flags, and warns about the rest', async () => {
    const r = await resolveWith(
      [
        '--proxy-mode',
        'service-port-portal',
        '--hostname-override',
        ' Node-A ',
        '-v',
        '4',
        '--logging-format',
        'json',
      ],
      `${HEADER}mode: userspace\nhostnameOverride: file-name\nlogging:\n  format: text\n  verbosity: 1\n`,
    );
    expect(r.errors).toEqual([]);
    expect(r.config?.mode).toBe('userspace');
    expect(r.config?.hostnameOverride).toBe('node-a');
    expect(r.config?.logging).toMatchObject({ format: 'json', verbosity: 4 });
    expect(r.warnings).toEqual([
      'flag --proxy-mode is ignored because --config is set; set it in the file instead',
    ]);
  });

  it('reads the services file relative to the config file', async () => {
    const r = await resolveWith([], `${HEADER}userspaceProxy:\n  servicesFile: services.yaml\n`);
    expect(r.config?.userspaceProxy.servicesFile).toBe('/etc/up/services.yaml');
  });

  it('refuses an empty hostname override', async () => {
    const r = await resolveWith(['--hostname-override', '  ']);
    expect(r.errors).toEqual(['empty hostname-override is invalid']);
  });

  it('combines decode and validation errors into one list', async () => {
    const r = await resolveWith(
      [],
      `${HEADER}bindAddress: nowhere\nbindAddressHardFail: 3\nmode: ipvs\n`,
    );
    expect(r.errors).toEqual([
      'failed to decode: bindAddressHardFail: Invalid input: expected boolean, received number',
      'KubeProxyConfiguration.Mode.ProxyMode: Invalid value: "ipvs": must be service-port-portal,userspace or blank (blank means the best-available proxy [currently service-port-portal])',
      'KubeProxyConfiguration.BindAddress: Invalid value: "nowhere": not a valid textual representation of an IP address',
    ]);
  });

  it('warns about feature gates, which have no effect, and takes enableProfiling', async () => {
    const r = await resolveWith([], `${HEADER}featureGates:\n  Foo: true\nenableProfiling: true\n`);
    expect(r.errors).toEqual([]);
    expect(r.warnings).toEqual([
      'feature gate "Foo" has no effect on userspace-proxy and is ignored',
    ]);
    expect(r.config?.enableProfiling).toBe(true);
  });

  it('sets enableProfiling from --profiling', async () => {
    expect((await resolveWith(['--profiling'])).config?.enableProfiling).toBe(true);
  });

  it('reports a file that cannot be read', async () => {
    const r = await resolveConfiguration({
      configFile: '/nope.yaml',
      flags: {},
      explicit: new Set(),
      configFlags: new Set(),
      read: async () => {
        throw new Error('ENOENT: no such file or directory');
      },
    });
    expect(r.errors).toEqual([
      'failed to read config file /nope.yaml: ENOENT: no such file or directory',
    ]);
  });
});
