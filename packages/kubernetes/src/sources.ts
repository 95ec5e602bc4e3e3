import type { KubeConfig } from '@kubernetes/client-node';
import {
  componentLogger,
  type EndpointSlice,
  type Endpoints,
  type EventRecorder,
  InvalidOptionError,
  type Logger,
  type Service,
  type SharedInformer,
  validateEndpointSlice,
  validateEndpoints,
  validateService,
} from '@userspace-proxy/core';
import { LOG_MESSAGE_MAX_CHARS, logSafe } from '@userspace-proxy/core/diagnostics';
import type { BackoffOptions } from './backoff.js';
import {
  KubernetesEventRecorder,
  type KubernetesEventRecorderOptions,
} from './event-recorder-kubernetes.js';
import { FilteringInformer } from './filtering-informer.js';
import {
  type ClientNodeInformer,
  ClientNodeInformerAdapter,
  DEFAULT_RESYNC_PERIOD_MS,
} from './informer-adapter.js';
import { loadKubeConfig } from './kube-config.js';
import {
  createKubeInformer,
  type GuardedInformerOptions,
  type InformerSpec,
} from './kube-informer.js';
import { NodeInfo, type NodeLike } from './node-info.js';
import {
  endpointSliceTransform,
  stripUnreadFields,
  validatingTransform,
} from './object-transform.js';
import type { KeyedObject } from './object-validation.js';
import {
  isProxiedEndpoints,
  isProxiedService,
  nodeFieldSelector,
  PROXY_LABEL_SELECTOR,
  SERVICE_FIELD_SELECTOR,
} from './selectors.js';
import { KubernetesUnidler } from './unidler.js';
import type { KubernetesUnidlerOptions } from './unidler-options.js';

/** What the daemon (and an integrator) gets: the same shape as the server's `ProxySources`. */
export interface KubernetesSources {
  services: SharedInformer<Service>;
  /** Present unless `useEndpointSlices` is false. */
  endpointSlices?: SharedInformer<EndpointSlice>;
  /** Present when `useEndpointSlices` is false. */
  endpoints?: SharedInformer<Endpoints>;
  /** The Node's primary IPs, for the `primary` node-port keyword; empty until the Node is known. */
  nodeIPs(): string[];
  /** Node eligibility for `/healthz` (false while the Node is unknown or being deleted). */
  nodeEligible(): boolean;
  /** Writes core/v1 Events, flood-protected. */
  recorder: EventRecorder;
  /**
   * Starts following this node's Node ahead of `run` (only the Node: nothing else is listed yet) for
   * as long as `signal` is not aborted, and resolves true once the Node is known, or false after
   * `timeoutMs` or when `signal` aborts. A daemon calls it before building a Proxier whose `primary`
   * node-port addresses need the node's IPs, which a Proxier reads once; `run` later carries on with
   * the same Node watch instead of starting a second one.
   */
  waitForNode(signal: AbortSignal, timeoutMs: number): Promise<boolean>;
  /**
   * Calls `listener` after every change of the Node (first seen, new IPs or eligibility, deleted), so
   * that whoever built something from its IPs can tell when they no longer hold. Returns the remover.
   */
  onNodeChange(listener: () => void): () => void;
  /** Lists and watches until `signal` aborts, then stops and drops unsent events. */
  run(signal: AbortSignal): Promise<void>;
  /**
   * A {@link KubernetesUnidler} on this source's client, for idling (the hook that scales an idled
   * Service's workloads back up). Made on demand, so a proxy without idling never makes one; absent
   * when the source was built from provided informers without a KubeConfig.
   */
  createUnidler?(options?: KubernetesUnidlerOptions): KubernetesUnidler;
}

/** An informer the integrator already runs: a client-node one, or one of core's contract. */
export type ProvidedInformer<T> = ClientNodeInformer<T> | SharedInformer<T>;

/** Options of {@link createKubernetesSources}. */
export interface KubernetesSourcesOptions {
  /** `--kubeconfig`. */
  kubeconfig?: string;
  /** `--master`. */
  master?: string;
  /** A loaded config (integrators, tests); wins over the two above. Else in-cluster configuration. */
  kubeConfig?: KubeConfig;
  /** This node's name (`--hostname-override`, else the host name); trimmed and lowercased. */
  nodeName: string;
  /** EndpointSlices (discovery.k8s.io/v1) when true, the default; legacy Endpoints when false. */
  useEndpointSlices?: boolean;
  /** Informer resync. Default 900 000 (kube-proxy's configSyncPeriod); 0 disables. */
  resyncPeriodMs?: number;
  logger?: Logger;
  /** Flood limits and identity of the event recorder (`host` defaults to the node name). */
  recorderOptions?: KubernetesEventRecorderOptions;
  /**
   * Informers the integrator already runs, used instead of building new ones, so nothing is listed
   * or watched twice. Their owner starts and stops them; they are filtered on the client with
   * kube-proxy's selectors (and the node informer to this node).
   */
  informers?: {
    services?: ProvidedInformer<Service>;
    endpointSlices?: ProvidedInformer<EndpointSlice>;
    endpoints?: ProvidedInformer<Endpoints>;
    node?: ProvidedInformer<NodeLike>;
  };
  /** Tuning of the informers built here. */
  informerOptions?: GuardedInformerOptions & { backoff?: BackoffOptions };
  /** In-cluster configuration: the service-account directory (tests). */
  serviceAccountDir?: string;
  /** In-cluster configuration: the environment (tests). Default `process.env`. */
  env?: Record<string, string | undefined>;
}

interface Runnable {
  run?(signal: AbortSignal): Promise<void>;
}

function isSharedInformer<T>(inf: ProvidedInformer<T>): inf is SharedInformer<T> {
  return typeof (inf as SharedInformer<T>).addEventHandler === 'function';
}

/**
 * Builds the Kubernetes sources the proxy needs: Services and EndpointSlices (or Endpoints) with
 * kube-proxy's selectors, this node's Node, and an event recorder. Nothing talks to the API server
 * until `run()`. Losing the API server later keeps the last known objects (and so the proxy's state
 * and `/healthz`) as they were; informers retry with back-off and relist if their history expired.
 */
export async function createKubernetesSources(
  opts: KubernetesSourcesOptions,
): Promise<KubernetesSources> {
  const nodeName = typeof opts?.nodeName === 'string' ? opts.nodeName.trim().toLowerCase() : '';
  if (nodeName === '') throw new InvalidOptionError('nodeName', 'empty node name is invalid');
  // It goes into a field selector; a Node name is a DNS subdomain, so anything else is refused.
  if (nodeName.length > 253 || !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(nodeName)) {
    throw new InvalidOptionError(
      'nodeName',
      `"${nodeName}" is not a valid Node name (a DNS subdomain)`,
    );
  }
  const log = componentLogger(opts.logger, 'kubernetes');
  const provided = opts.informers ?? {};
  const needsClient =
    !provided.services || !(provided.endpointSlices ?? provided.endpoints) || !provided.node;
  let kc: KubeConfig | undefined;
  try {
    kc = loadKubeConfig({
      ...(opts.kubeConfig ? { kubeConfig: opts.kubeConfig } : {}),
      ...(opts.kubeconfig ? { kubeconfig: opts.kubeconfig } : {}),
      ...(opts.master ? { master: opts.master } : {}),
      ...(opts.serviceAccountDir ? { serviceAccountDir: opts.serviceAccountDir } : {}),
      ...(opts.env ? { env: opts.env } : {}),
    });
  } catch (err) {
    if (needsClient) throw err;
    // Every informer was provided and no client configured: events stay in the logs.
    log.warn(`no API client configured; Events are only logged: ${(err as Error).message}`);
  }
  const resyncPeriodMs = opts.resyncPeriodMs ?? DEFAULT_RESYNC_PERIOD_MS;
  const runnables: Runnable[] = [];

  function source<T extends KeyedObject>(
    spec: InformerSpec,
    given: ProvidedInformer<T> | undefined,
    filter: (obj: T) => boolean,
  ): SharedInformer<T> {
    if (given && isSharedInformer(given)) return new FilteringInformer(given, filter);
    const common = {
      kind: spec.kind,
      resyncPeriodMs,
      filter,
      ...(opts.logger ? { logger: opts.logger } : {}),
    };
    const adapter = given
      ? new ClientNodeInformerAdapter<T>(given, { ...common, manage: false })
      : createKubeInformer<T>(kc as KubeConfig, spec, { ...opts.informerOptions, ...common })
          .adapter;
    runnables.push(adapter);
    return adapter;
  }

  const services = source<Service>(
    {
      path: '/api/v1/services',
      kind: 'Service',
      labelSelector: PROXY_LABEL_SELECTOR,
      fieldSelector: SERVICE_FIELD_SELECTOR,
      transform: validatingTransform(validateService),
    },
    provided.services,
    isProxiedService,
  );
  const useSlices = opts.useEndpointSlices ?? true;
  const endpointSlices = useSlices
    ? source<EndpointSlice>(
        {
          path: '/apis/discovery.k8s.io/v1/endpointslices',
          kind: 'EndpointSlice',
          labelSelector: PROXY_LABEL_SELECTOR,
          transform: endpointSliceTransform(validateEndpointSlice),
        },
        provided.endpointSlices,
        isProxiedEndpoints,
      )
    : undefined;
  const endpoints = useSlices
    ? undefined
    : source<Endpoints>(
        {
          path: '/api/v1/endpoints',
          kind: 'Endpoints',
          labelSelector: PROXY_LABEL_SELECTOR,
          transform: validatingTransform(validateEndpoints),
        },
        provided.endpoints,
        isProxiedEndpoints,
      );
  const nodeInformer = source<NodeLike>(
    {
      path: '/api/v1/nodes',
      kind: 'Node',
      fieldSelector: nodeFieldSelector(nodeName),
      transform: stripUnreadFields,
    },
    provided.node,
    (n) => n.metadata.name === nodeName,
  );
  const nodeInfo = new NodeInfo(nodeInformer, nodeName, opts.logger);
  // The Node informer, when it is built here (a provided one is run by its owner).
  const nodeRunnable = (runnables as unknown[]).includes(nodeInformer)
    ? (nodeInformer as Runnable)
    : undefined;
  const recorder = kc
    ? new KubernetesEventRecorder(kc, {
        host: nodeName,
        ...opts.recorderOptions,
        ...(opts.logger ? { logger: opts.logger } : {}),
      })
    : undefined;

  const result: KubernetesSources = {
    ...(kc
      ? {
          createUnidler: (options: KubernetesUnidlerOptions = {}) =>
            new KubernetesUnidler(kc, {
              ...(opts.logger ? { logger: opts.logger } : {}),
              ...options,
            }),
        }
      : {}),
    services,
    nodeIPs: () => nodeInfo.nodeIPs(),
    nodeEligible: () => nodeInfo.nodeEligible(),
    onNodeChange: (listener) => nodeInfo.onChange(listener),
    async waitForNode(signal: AbortSignal, timeoutMs: number): Promise<boolean> {
      if (nodeInfo.node()) return true;
      if (signal.aborted) return false;
      void nodeRunnable
        ?.run?.(signal)
        ?.catch((err: unknown) => log.error('the Node watch failed', err));
      const wait = new AbortController();
      const timer = setTimeout(() => wait.abort(), Math.max(0, timeoutMs));
      const onAbort = () => wait.abort();
      signal.addEventListener('abort', onAbort, { once: true });
      try {
        return await nodeInfo.whenKnown(wait.signal);
      } finally {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
      }
    },
    recorder: recorder ?? {
      event: (ref, type, reason, message) =>
        log.info(
          // The message embeds input (names, validation reasons): escaped and cut, as core does.
          logSafe(
            `Event(${ref?.kind} ${ref?.namespace ?? ''}/${ref?.name}): ${type} ${reason}: ${message}`,
            LOG_MESSAGE_MAX_CHARS,
          ),
        ),
    },
    async run(signal: AbortSignal): Promise<void> {
      log.info(
        `watching the API server for node ${nodeName} (${useSlices ? 'EndpointSlices' : 'Endpoints'})`,
      );
      await Promise.all(runnables.map((r) => r.run?.(signal)));
      await recorder?.close();
    },
  };
  if (endpointSlices) result.endpointSlices = endpointSlices;
  if (endpoints) result.endpoints = endpoints;
  return result;
}
