import type { Logger } from '@userspace-proxy/core';
import type { KubeProxyConfiguration } from './config-schema.js';
import type { ProxyMetrics } from './metrics.js';
import { createManifestSource } from './source-manifest.js';
import {
  chooseSource,
  type KubernetesImporter,
  type KubernetesSourcesOptions,
  loadClusterSources,
  type ProxySources,
} from './sources.js';

/**
 * Builds the daemon's sources from its configuration: the manifest file, or the Kubernetes API
 * through `@userspace-proxy/kubernetes` (see {@link chooseSource} for the rule).
 */

/** What {@link createSources} needs. */
export interface SourceFactoryOptions {
  config: KubeProxyConfiguration;
  /** `--master`, "" when not given. */
  master: string;
  nodeName: string;
  logger: Logger;
  /** Counts manifest reloads. */
  metrics?: ProxyMetrics;
  env?: Record<string, string | undefined>;
  /**
   * Builds the cluster source when one is chosen. Default: import `@userspace-proxy/kubernetes` and
   * call its `createKubernetesSources` (failing with "the Kubernetes source is not available in this
   * build" when it is missing).
   */
  clusterSource?: (options: KubernetesSourcesOptions) => Promise<ProxySources>;
  /** How the default cluster source imports the package; injectable for tests. */
  importer?: KubernetesImporter;
}

/**
 * The sources for `options.config`.
 * @throws Error naming what is missing or invalid (no source, a bad manifest, no Kubernetes support).
 */
export async function createSources(options: SourceFactoryOptions): Promise<ProxySources> {
  const { config, logger } = options;
  const choice = chooseSource({
    servicesFile: config.userspaceProxy.servicesFile,
    kubeconfig: config.clientConnection.kubeconfig,
    master: options.master,
    ...(options.env ? { env: options.env } : {}),
  });
  switch (choice.kind) {
    case 'none':
      throw new Error(choice.error);
    case 'manifest':
      return createManifestSource({
        path: choice.path,
        logger,
        onReload: (outcome) =>
          options.metrics?.manifestReloaded(outcome.applied ? 'applied' : 'rejected'),
      });
    case 'cluster': {
      const { requestTimeout, requestDeadline, ...caps } = config.userspaceProxy.listLimits;
      const k8s: KubernetesSourcesOptions = {
        nodeName: options.nodeName,
        useEndpointSlices: true,
        resyncPeriodMs: config.configSyncPeriod,
        logger,
        informerOptions: {
          list: { ...caps, requestTimeoutMs: requestTimeout, requestDeadlineMs: requestDeadline },
        },
      };
      if (choice.kubeconfig !== '') k8s.kubeconfig = choice.kubeconfig;
      if (choice.master !== '') k8s.master = choice.master;
      const load = options.clusterSource ?? ((o) => loadClusterSources(o, options.importer));
      return load(k8s);
    }
  }
}
