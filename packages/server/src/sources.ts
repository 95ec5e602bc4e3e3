import type {
  EndpointSlice,
  Endpoints,
  EventRecorder,
  Logger,
  Service,
  SharedInformer,
} from '@userspace-proxy/core';
import type { UnidleHook } from '@userspace-proxy/idler';
import { importBundledKubernetes, type KubernetesBundleStatus } from './kubernetes-bundle.js';

/**
 * Where the daemon's Services and endpoints come from. The seam between the daemon and its sources:
 * the manifest file (source-manifest.ts) implements it here, and `@userspace-proxy/kubernetes`
 * implements it for an API server, loaded only when a cluster is asked for so a standalone daemon
 * never loads the Kubernetes client.
 */

/** Everything a source gives the daemon. */
export interface ProxySources {
  services: SharedInformer<Service>;
  /** EndpointSlices; preferred when both are given. */
  endpointSlices?: SharedInformer<EndpointSlice>;
  /** Legacy Endpoints, for sources (and manifests) that still have them. */
  endpoints?: SharedInformer<Endpoints>;
  /** The node's IPs, for `nodePortAddresses: [primary]`; absent: detected from the interfaces. */
  nodeIPs?(): string[];
  /** False when the node is being deleted (a cluster's Node object); /healthz then answers 503. */
  nodeEligible?(): boolean;
  /**
   * Starts following the node's own object ahead of `run` and resolves true once it is known, false
   * after `timeoutMs` or when `signal` aborts. The daemon calls it before it builds the Proxier when
   * `primary` node-port addresses need `nodeIPs()`, which the Proxier reads only once.
   */
  waitForNode?(signal: AbortSignal, timeoutMs: number): Promise<boolean>;
  /** Calls `listener` after each change of the node's object; returns the function that removes it. */
  onNodeChange?(listener: () => void): () => void;
  /** Where events go (Kubernetes Events for a cluster); absent: logged by the daemon. */
  recorder?: EventRecorder;
  /**
   * Runs watches and the like until `signal` aborts. The daemon calls it after registering every
   * handler; a source whose informers deliver objects at once (the manifest) holds them until then.
   */
  run(signal: AbortSignal): Promise<void>;
  /**
   * The idler's unidle hook on this source's cluster client (a cluster source's KubernetesUnidler),
   * made only when idling is on. Absent for the manifest source: idled Services there get the
   * NeedPods Event (logged) and nothing scales.
   */
  createUnidler?(): UnidleHook & { close(): Promise<void> };
}

/** What `createKubernetesSources` in `@userspace-proxy/kubernetes` takes. */
export interface KubernetesSourcesOptions {
  kubeconfig?: string;
  master?: string;
  nodeName: string;
  useEndpointSlices: true;
  resyncPeriodMs: number;
  logger: Logger;
  /** The caps of the informers' paged lists (`userspaceProxy.listLimits`); absent: the package's. */
  informerOptions?: { list: ListPagingLimits };
}

/** The list caps of `createKubernetesSources`' `informerOptions.list` that the daemon sets. */
export interface ListPagingLimits {
  pageSize: number;
  maxPages: number;
  maxItems: number;
  maxPageBytes: number;
  maxListBytes: number;
  requestTimeoutMs: number;
  requestDeadlineMs: number;
}

/** Which source a run uses, and why, for the startup log line. */
export type SourceChoice =
  | { kind: 'manifest'; path: string }
  | { kind: 'cluster'; kubeconfig: string; master: string; inCluster: boolean }
  | { kind: 'none'; error: string };

/** The message when the kubernetes package is missing or has no `createKubernetesSources`. */
export const KUBERNETES_UNAVAILABLE = 'the Kubernetes source is not available in this build';

/**
 * Chooses the source: the cluster when `--kubeconfig` or `--master` is given, or when running in a
 * Pod (KUBERNETES_SERVICE_HOST) with no `--services-file`; else the manifest file. Giving both a
 * manifest and a kubeconfig/master is refused rather than guessed.
 */
export function chooseSource(options: {
  servicesFile: string;
  kubeconfig: string;
  master: string;
  env?: Record<string, string | undefined>;
}): SourceChoice {
  const { servicesFile, kubeconfig, master } = options;
  const env = options.env ?? process.env;
  if (servicesFile !== '' && (kubeconfig !== '' || master !== '')) {
    return {
      kind: 'none',
      error:
        'both a services file and a cluster (--kubeconfig/--master) were given; choose one source',
    };
  }
  if (kubeconfig !== '' || master !== '')
    return { kind: 'cluster', kubeconfig, master, inCluster: false };
  if (servicesFile !== '') return { kind: 'manifest', path: servicesFile };
  if (env.KUBERNETES_SERVICE_HOST) return { kind: 'cluster', kubeconfig, master, inCluster: true };
  return {
    kind: 'none',
    error:
      'no source of Services: give --services-file (or userspaceProxy.servicesFile), or --kubeconfig/--master for a cluster',
  };
}

/**
 * Loads `@userspace-proxy/kubernetes`; injectable so tests can stand in for a build without it. The
 * logger is the daemon's, for the one line that says which form was loaded.
 */
export type KubernetesImporter = (logger?: Logger) => Promise<Record<string, unknown>>;

/** What the startup log says about each outcome of {@link importBundledKubernetes}. */
const BUNDLE_STATUS: Record<KubernetesBundleStatus, string | undefined> = {
  loaded: 'the cluster client is loaded as one bundle (dist/kubernetes.bundle.js)',
  stale:
    'the cluster client is loaded from its packages: dist/kubernetes.bundle.js was made from another build of @userspace-proxy/kubernetes (pnpm build makes it again)',
  unreadable:
    'the cluster client is loaded from its packages: dist/kubernetes.bundle.json cannot be read',
  absent: undefined, // running from the sources, or a build without the bundling step
};

/**
 * The bundle `pnpm build` makes of the package and client-node (kubernetes-bundle.ts: some 20–40 MiB
 * less RSS) when it matches the installed package, else the package itself.
 */
const defaultImporter: KubernetesImporter = async (logger) =>
  (await importBundledKubernetes(undefined, undefined, (status) => {
    const line = BUNDLE_STATUS[status];
    if (line !== undefined) logger?.info(line);
  })) ?? ((await import('@userspace-proxy/kubernetes')) as unknown as Record<string, unknown>);

/**
 * Builds the cluster source through `createKubernetesSources` of `@userspace-proxy/kubernetes`.
 * @throws Error with {@link KUBERNETES_UNAVAILABLE} when the package or the export is missing.
 */
export async function loadClusterSources(
  options: KubernetesSourcesOptions,
  importer: KubernetesImporter = defaultImporter,
): Promise<ProxySources> {
  let mod: Record<string, unknown>;
  try {
    mod = await importer(options.logger);
  } catch (err) {
    throw new Error(KUBERNETES_UNAVAILABLE, { cause: err });
  }
  const create = mod.createKubernetesSources;
  if (typeof create !== 'function') throw new Error(KUBERNETES_UNAVAILABLE);
  return (await create(options)) as ProxySources;
}
