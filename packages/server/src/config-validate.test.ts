import { describe, expect, it } from 'vitest';
// Not exported by the package: its defaults are read here only to hold the daemon's copy equal.
import { DEFAULT_LIST_LIMITS } from '../../kubernetes/src/list-pager.js';
import { decodeConfiguration } from './config-load.js';
import { defaultConfiguration, type KubeProxyConfiguration } from './config-schema.js';
import { validateConfiguration, validateHostPort } from './config-validate.js';

function errorsOf(mutate: (c: KubeProxyConfiguration) => void): string[] {
  const config = defaultConfiguration();
  mutate(config);
  return validateConfiguration(config).map(String);
}

describe('validateConfiguration', () => {
  it('accepts the defaults', () => {
    expect(errorsOf(() => {})).toEqual([]);
  });

  it('refuses a negative SCTP per-address cap and takes 0 (no cap of its own)', () => {
    const errors = errorsOf((c) => {
      c.userspaceProxy.sctpMaxAssociationsPerAddress = -1;
    });
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain('SCTPMaxAssociationsPerAddress: Invalid value: -1');
    expect(defaultConfiguration().userspaceProxy.sctpMaxAssociationsPerAddress).toBe(0);
  });

  it('refuses DataPath native with more than one worker (its helper uses every core itself)', () => {
    for (const workers of [2, 'auto'] as const) {
      const errors = errorsOf((c) => {
        c.userspaceProxy.dataPath = 'native';
        c.userspaceProxy.workers = workers;
      });
      expect(errors).toHaveLength(1);
      expect(errors[0]).toContain('Workers: Invalid value');
      expect(errors[0]).toContain('DataPath "native"');
    }
    expect(
      errorsOf((c) => {
        c.userspaceProxy.dataPath = 'native';
      }),
    ).toEqual([]);
    expect(defaultConfiguration().userspaceProxy.dataPath).toBe('node');
  });

  it("takes the Kubernetes list caps from the file, defaulting to the package's own", () => {
    const { requestTimeoutMs, requestDeadlineMs, ...caps } = DEFAULT_LIST_LIMITS;
    expect(defaultConfiguration().userspaceProxy.listLimits).toEqual({
      ...caps,
      requestTimeout: requestTimeoutMs,
      requestDeadline: requestDeadlineMs,
    });
    const decoded = decodeConfiguration(
      'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n' +
        'userspaceProxy: { listLimits: { maxItems: 5000000, requestDeadline: 5m } }\n',
    );
    expect(decoded.errors).toEqual([]);
    const limits = defaultConfiguration(decoded.input).userspaceProxy.listLimits;
    expect(limits).toMatchObject({
      maxItems: 5_000_000,
      requestDeadline: 300_000,
      maxPages: 10_000,
    });
    const wrong = decodeConfiguration(
      'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n' +
        'userspaceProxy: { listLimits: { maxPages: 1.5, maxItems: many, pages: 3 } }\n',
    );
    expect(wrong.errors).toEqual([
      expect.stringContaining('userspaceProxy.listLimits.maxPages'),
      expect.stringContaining('userspaceProxy.listLimits.maxItems'),
    ]);
    expect(wrong.warnings).toEqual(['unknown field "userspaceProxy.listLimits.pages" is ignored']);
  });

  it('refuses list caps that would refuse every list; a page size of 0 lists in one request', () => {
    const errors = errorsOf((c) => {
      c.userspaceProxy.listLimits = {
        pageSize: -1,
        maxPages: 0,
        maxItems: 0,
        maxPageBytes: -5,
        maxListBytes: 0,
        requestTimeout: 0,
        requestDeadline: -1000,
      };
    });
    const at = 'KubeProxyConfiguration.UserspaceProxy.ListLimits';
    expect(errors).toEqual([
      `${at}.PageSize: Invalid value: -1: must be greater than or equal to 0`,
      `${at}.MaxPages: Invalid value: 0: must be greater than 0`,
      `${at}.MaxItems: Invalid value: 0: must be greater than 0`,
      `${at}.MaxPageBytes: Invalid value: -5: must be greater than 0`,
      `${at}.MaxListBytes: Invalid value: 0: must be greater than 0`,
      `${at}.RequestTimeout: Invalid value: 0s: must be greater than 0`,
      `${at}.RequestDeadline: Invalid value: -1s: must be greater than 0`,
    ]);
    expect(
      errorsOf((c) => {
        c.userspaceProxy.listLimits.pageSize = 0;
      }),
    ).toEqual([]);
  });

  it('refuses an SCTP MTU outside 576-65535 and defaults to 1500', () => {
    for (const mtu of [575, 65_536]) {
      const errors = errorsOf((c) => {
        c.userspaceProxy.sctpMtu = mtu;
      });
      expect(errors).toHaveLength(1);
      expect(errors[0]).toContain(`SCTPMTU: Invalid value: ${mtu}`);
    }
    expect(
      errorsOf((c) => {
        c.userspaceProxy.sctpMtu = 1450;
      }),
    ).toEqual([]);
    expect(defaultConfiguration().userspaceProxy.sctpMtu).toBe(1500);
  });

  it.each<[string, (c: KubeProxyConfiguration) => void, string[]]>([
    [
      'masqueradeBit out of range',
      (c) => {
        c.iptables.masqueradeBit = 32;
      },
      [
        'KubeProxyConfiguration.KubeProxyIPTablesConfiguration.MasqueradeBit: Invalid value: 32: must be within the range [0, 31]',
      ],
    ],
    [
      'a negative sync period (also below the min)',
      (c) => {
        c.iptables.syncPeriod = -1000;
      },
      [
        'KubeProxyConfiguration.KubeProxyIPTablesConfiguration.SyncPeriod: Invalid value: -1s: must be greater than 0',
        'KubeProxyConfiguration.KubeProxyIPTablesConfiguration.SyncPeriod: Invalid value: 1s: must be greater than or equal to KubeProxyConfiguration.KubeProxyIPTablesConfiguration.MinSyncPeriod',
      ],
    ],
    [
      'a negative min sync period',
      (c) => {
        c.iptables.minSyncPeriod = -500;
      },
      [
        'KubeProxyConfiguration.KubeProxyIPTablesConfiguration.MinSyncPeriod: Invalid value: -500ms: must be greater than or equal to 0',
      ],
    ],
    [
      'min sync period above the sync period',
      (c) => {
        c.iptables.minSyncPeriod = 60_000;
      },
      [
        'KubeProxyConfiguration.KubeProxyIPTablesConfiguration.SyncPeriod: Invalid value: 1m0s: must be greater than or equal to KubeProxyConfiguration.KubeProxyIPTablesConfiguration.MinSyncPeriod',
      ],
    ],
    [
      'negative conntrack values',
      (c) => {
        c.conntrack.maxPerCore = -1;
        c.conntrack.min = -2;
        c.conntrack.tcpEstablishedTimeout = -1000;
        c.conntrack.tcpCloseWaitTimeout = -1000;
        c.conntrack.udpTimeout = -1000;
        c.conntrack.udpStreamTimeout = -1000;
      },
      [
        'KubeProxyConfiguration.KubeProxyConntrackConfiguration.MaxPerCore: Invalid value: -1: must be greater than or equal to 0',
        'KubeProxyConfiguration.KubeProxyConntrackConfiguration.Min: Invalid value: -2: must be greater than or equal to 0',
        'KubeProxyConfiguration.KubeProxyConntrackConfiguration.TCPEstablishedTimeout: Invalid value: -1s: must be greater than or equal to 0',
        'KubeProxyConfiguration.KubeProxyConntrackConfiguration.TCPCloseWaitTimeout: Invalid value: -1s: must be greater than or equal to 0',
        'KubeProxyConfiguration.KubeProxyConntrackConfiguration.UDPTimeout: Invalid value: -1s: must be greater than or equal to 0',
        'KubeProxyConfiguration.KubeProxyConntrackConfiguration.UDPStreamTimeout: Invalid value: -1s: must be greater than or equal to 0',
      ],
    ],
    [
      'an unsupported mode',
      (c) => {
        c.mode = 'iptables';
      },
      [
        'KubeProxyConfiguration.Mode.ProxyMode: Invalid value: "iptables": must be service-port-portal,userspace or blank (blank means the best-available proxy [currently service-port-portal])',
      ],
    ],
    [
      'a negative burst',
      (c) => {
        c.clientConnection.burst = -1;
      },
      [
        'KubeProxyConfiguration.ClientConnection.Burst: Invalid value: -1: must be greater than or equal to 0',
      ],
    ],
    [
      'oomScoreAdj out of range',
      (c) => {
        c.oomScoreAdj = 1001;
      },
      [
        'KubeProxyConfiguration.OOMScoreAdj: Invalid value: 1001: must be within the range [-1000, 1000]',
      ],
    ],
    [
      'a zero UDP idle timeout',
      (c) => {
        c.udpIdleTimeout = 0;
      },
      ['KubeProxyConfiguration.UDPIdleTimeout: Invalid value: 0s: must be greater than 0'],
    ],
    [
      'a negative config sync period',
      (c) => {
        c.configSyncPeriod = -1000;
      },
      ['KubeProxyConfiguration.ConfigSyncPeriod: Invalid value: -1s: must be greater than 0'],
    ],
    [
      'a bind address that is not an IP',
      (c) => {
        c.bindAddress = 'node-1';
      },
      [
        'KubeProxyConfiguration.BindAddress: Invalid value: "node-1": not a valid textual representation of an IP address',
      ],
    ],
    [
      'a healthz address without a port',
      (c) => {
        c.healthzBindAddress = 'localhost';
      },
      ['KubeProxyConfiguration.HealthzBindAddress: Invalid value: "localhost": must be IP:port'],
    ],
    [
      'a metrics address with a host name and a bad port',
      (c) => {
        c.metricsBindAddress = 'localhost:http';
      },
      [
        'KubeProxyConfiguration.MetricsBindAddress: Invalid value: "localhost": must be a valid IP',
        'KubeProxyConfiguration.MetricsBindAddress: Invalid value: "http": must be a valid port',
      ],
    ],
    [
      'an empty metrics address (the healthz one may be empty)',
      (c) => {
        c.metricsBindAddress = '';
        c.healthzBindAddress = '';
      },
      ['KubeProxyConfiguration.MetricsBindAddress: Invalid value: "": must be IP:port'],
    ],
    [
      'three cluster CIDRs',
      (c) => {
        c.clusterCIDR = '10.0.0.0/8,10.1.0.0/16,fd00::/64';
      },
      [
        'KubeProxyConfiguration.ClusterCIDR: Invalid value: "10.0.0.0/8,10.1.0.0/16,fd00::/64": only one CIDR allowed or a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)',
      ],
    ],
    [
      'two cluster CIDRs of one family',
      (c) => {
        c.clusterCIDR = '10.0.0.0/8,10.1.0.0/16';
      },
      [
        'KubeProxyConfiguration.ClusterCIDR: Invalid value: "10.0.0.0/8,10.1.0.0/16": must be a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)',
      ],
    ],
    [
      'a bad cluster CIDR',
      (c) => {
        c.clusterCIDR = '10.0.0.0/33';
      },
      [
        'KubeProxyConfiguration.ClusterCIDR: Invalid value: "10.0.0.0/33": must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)',
      ],
    ],
    [
      'a bad port range',
      (c) => {
        c.portRange = '2000-1000';
      },
      [
        'KubeProxyConfiguration.PortRange: Invalid value: "2000-1000": must be a valid port range (e.g. 300-2000)',
      ],
    ],
    [
      'a bad node-port address',
      (c) => {
        c.nodePortAddresses = ['primary', '10.0.0.0/8', 'localhost', 'eth0'];
      },
      ['KubeProxyConfiguration.NodePortAddresses[3]: Invalid value: "eth0": must be a valid CIDR'],
    ],
    [
      'a hidden-metrics version that is not the previous minor',
      (c) => {
        c.showHiddenMetricsForVersion = '1.2';
      },
      [
        'KubeProxyConfiguration.ShowHiddenMetricsForVersion: Invalid value: "1.2": --show-hidden-metrics-for-version must be omitted or have the value \'0.0\'. Only the previous minor version is allowed',
      ],
    ],
    [
      'an unknown detect-local mode',
      (c) => {
        c.detectLocalMode = 'Magic';
      },
      [
        'KubeProxyConfiguration.DetectLocalMode: Unsupported value: "Magic": supported values: "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix", ""',
      ],
    ],
    [
      'BridgeInterface without an interface',
      (c) => {
        c.detectLocalMode = 'BridgeInterface';
      },
      [
        'KubeProxyConfiguration.DetectLocalConfiguration.InterfaceName: Invalid value: "": must not be empty',
      ],
    ],
    [
      'InterfaceNamePrefix without a prefix',
      (c) => {
        c.detectLocalMode = 'InterfaceNamePrefix';
      },
      [
        'KubeProxyConfiguration.DetectLocalConfiguration.InterfacePrefix: Invalid value: "": must not be empty',
      ],
    ],
    [
      'an unknown log format, a huge verbosity and vmodule with json',
      (c) => {
        c.logging.format = 'xml';
        c.logging.verbosity = 2 ** 31;
        c.logging.vmodule = [{ filePattern: 'x', verbosity: 1 }];
      },
      [
        'KubeProxyConfiguration.logging.format: Invalid value: "xml": Unsupported log format',
        'KubeProxyConfiguration.logging.verbosity: Invalid value: 2147483648: Must be <= 2147483647',
        'KubeProxyConfiguration.logging.vmodule: Forbidden: Only supported for text log format',
      ],
    ],
    [
      'negative limits in the extension block',
      (c) => {
        c.userspaceProxy.drainTimeout = -1000;
        c.userspaceProxy.maxConnectionsPerPort = -1;
        c.userspaceProxy.maxUdpSessionsPerPort = 0;
        c.userspaceProxy.tcpIdleTimeout = -1;
        c.userspaceProxy.tcpHalfCloseTimeout = -1;
        c.userspaceProxy.tcpKeepAlive = -1;
        c.userspaceProxy.udpBufferBytes = -1;
        c.userspaceProxy.nodeWaitTimeout = -1000;
      },
      [
        'KubeProxyConfiguration.UserspaceProxy.DrainTimeout: Invalid value: -1s: must be greater than or equal to 0',
        'KubeProxyConfiguration.UserspaceProxy.MaxConnectionsPerPort: Invalid value: -1: must be greater than or equal to 0',
        'KubeProxyConfiguration.UserspaceProxy.MaxUDPSessionsPerPort: Invalid value: 0: must be greater than 0',
        'KubeProxyConfiguration.UserspaceProxy.TCPIdleTimeout: Invalid value: -1ms: must be greater than or equal to 0',
        'KubeProxyConfiguration.UserspaceProxy.TCPHalfCloseTimeout: Invalid value: -1ms: must be greater than or equal to 0',
        'KubeProxyConfiguration.UserspaceProxy.TCPKeepAlive: Invalid value: -1ms: must be greater than or equal to 0',
        'KubeProxyConfiguration.UserspaceProxy.UDPBufferBytes: Invalid value: -1: must be greater than or equal to 0',
        'KubeProxyConfiguration.UserspaceProxy.NodeWaitTimeout: Invalid value: -1s: must be greater than or equal to 0',
      ],
    ],
    [
      'no dial timeouts',
      (c) => {
        c.userspaceProxy.dialTimeouts = [];
      },
      [
        'KubeProxyConfiguration.UserspaceProxy.DialTimeouts: Required value: must contain at least one timeout',
      ],
    ],
    [
      'a zero dial timeout',
      (c) => {
        c.userspaceProxy.dialTimeouts = [250, 0];
      },
      [
        'KubeProxyConfiguration.UserspaceProxy.DialTimeouts[1]: Invalid value: 0s: must be greater than 0',
      ],
    ],
  ])('reports %s', (_name, mutate, expected) => {
    expect(errorsOf(mutate)).toEqual(expected);
  });

  it('lists every error of a config at once', () => {
    const errors = errorsOf((c) => {
      c.bindAddress = 'x';
      c.mode = 'ipvs';
      c.udpIdleTimeout = -1;
    });
    expect(errors).toHaveLength(3);
  });

  it('accepts both dual-stack CIDR orders and IPv6 addresses', () => {
    expect(
      errorsOf((c) => {
        c.clusterCIDR = 'fd00::/64,10.0.0.0/8';
        c.bindAddress = '::';
        c.healthzBindAddress = '[::]:10256';
        c.metricsBindAddress = '[::1]:10249';
        c.mode = 'userspace';
      }),
    ).toEqual([]);
  });
});

describe('validateHostPort', () => {
  it.each([
    ['127.0.0.1:0', ['P: Invalid value: "0": must be a valid port']],
    ['127.0.0.1:65536', ['P: Invalid value: "65536": must be a valid port']],
    ['127.0.0.1:', ['P: Invalid value: "": must be a valid port']],
    ['::1:80', ['P: Invalid value: "::1:80": must be IP:port']],
    ['[::1:80', ['P: Invalid value: "[::1:80": must be IP:port']],
    ['[::1]:80', []],
  ])('%s', (input, expected) => {
    expect(validateHostPort(input, 'P').map(String)).toEqual(expected);
  });
});
