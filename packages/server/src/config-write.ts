import { dirname, isAbsolute, relative, resolve } from 'node:path';
import { stringify } from 'yaml';
import type { KubeProxyConfiguration } from './config-schema.js';
import { formatDuration } from './duration.js';

/**
 * The effective configuration as a KubeProxyConfiguration file (`--write-config-to`): what the daemon
 * would run with, defaults included, durations as Go strings, so it can be edited and passed back
 * with `--config`.
 */

/** Where the file goes, so that its path fields still name the same files when it is read back. */
export interface ConfigurationWriteOptions {
  /** The path the file is written to (`--write-config-to`). Default: paths are written as they are. */
  writtenTo?: string;
  /** What relative paths in `config` are relative to. Default `process.cwd()`. */
  cwd?: string;
}

/**
 * The path fields of `config` rewritten for a file at `writtenTo`. `--config` reads
 * `userspaceProxy.servicesFile` relative to the file that names it, while `--services-file` (and
 * every path in a configuration that came from flags) is relative to the working directory: written
 * as is, the round trip would name another file. So the manifest is written relative to the new
 * file when it lies beside or below it, absolute otherwise; `clientConnection.kubeconfig`, which is
 * read as given (kube-proxy's rule), is written absolute.
 */
export function rebasePathFields(
  config: KubeProxyConfiguration,
  options: ConfigurationWriteOptions,
): KubeProxyConfiguration {
  if (options.writtenTo === undefined) return config;
  const cwd = options.cwd ?? process.cwd();
  const dir = dirname(resolve(cwd, options.writtenTo));
  const servicesFile = config.userspaceProxy.servicesFile;
  let rebased = servicesFile;
  if (servicesFile !== '') {
    const absolute = resolve(cwd, servicesFile);
    const rel = relative(dir, absolute);
    rebased = rel !== '' && !rel.startsWith('..') && !isAbsolute(rel) ? rel : absolute;
  }
  const kubeconfig = config.clientConnection.kubeconfig;
  return {
    ...config,
    clientConnection: {
      ...config.clientConnection,
      kubeconfig: kubeconfig === '' ? '' : resolve(cwd, kubeconfig),
    },
    userspaceProxy: { ...config.userspaceProxy, servicesFile: rebased },
  };
}

/** The v1alpha1 (file) form of `config`. */
export function toExternalConfiguration(
  input: KubeProxyConfiguration,
  options: ConfigurationWriteOptions = {},
): Record<string, unknown> {
  const config = rebasePathFields(input, options);
  const d = formatDuration;
  const c = config.conntrack;
  const ext = config.userspaceProxy;
  const nullable = (v: number | null) => (v === null ? null : d(v));
  return {
    ...config,
    iptables: {
      ...config.iptables,
      syncPeriod: d(config.iptables.syncPeriod),
      minSyncPeriod: d(config.iptables.minSyncPeriod),
    },
    conntrack: {
      ...c,
      tcpEstablishedTimeout: nullable(c.tcpEstablishedTimeout),
      tcpCloseWaitTimeout: nullable(c.tcpCloseWaitTimeout),
      udpTimeout: d(c.udpTimeout),
      udpStreamTimeout: d(c.udpStreamTimeout),
    },
    configSyncPeriod: d(config.configSyncPeriod),
    udpIdleTimeout: d(config.udpIdleTimeout),
    userspaceProxy: {
      ...ext,
      drainTimeout: d(ext.drainTimeout),
      tcpIdleTimeout: d(ext.tcpIdleTimeout),
      tcpHalfCloseTimeout: d(ext.tcpHalfCloseTimeout),
      tcpKeepAlive: d(ext.tcpKeepAlive),
      dialTimeouts: ext.dialTimeouts.map(d),
      nodeWaitTimeout: d(ext.nodeWaitTimeout),
      idlingHoldTimeout: d(ext.idlingHoldTimeout),
      listLimits: {
        ...ext.listLimits,
        requestTimeout: d(ext.listLimits.requestTimeout),
        requestDeadline: d(ext.listLimits.requestDeadline),
      },
    },
  };
}

/** YAML text of {@link toExternalConfiguration}. */
export function configurationYaml(
  config: KubeProxyConfiguration,
  options: ConfigurationWriteOptions = {},
): string {
  return stringify(toExternalConfiguration(config, options));
}
