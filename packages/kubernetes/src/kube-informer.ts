import { type KubeConfig, type KubernetesObject, ListWatch } from '@kubernetes/client-node';
import { componentLogger, type Logger } from '@userspace-proxy/core';
import { GuardedWatch, type GuardedWatchOptions } from './guarded-watch.js';
import {
  type ClientNodeInformer,
  ClientNodeInformerAdapter,
  type InformerAdapterOptions,
} from './informer-adapter.js';
import { type ListPagerStats, makePagedList, type PagedListOptions } from './list-pager.js';
import type { ObjectTransform } from './object-transform.js';
import type { KeyedObject } from './object-validation.js';

/** What to list and watch. */
export interface InformerSpec {
  /** The collection path, e.g. "/api/v1/services" (all namespaces). */
  path: string;
  /** The kind, for logs. */
  kind: string;
  labelSelector?: string;
  fieldSelector?: string;
  /**
   * Applied to every listed and watched object before it is cached and handed out (see
   * object-transform.ts: the package's own sources strip unread fields and cache core's validated
   * copy). Default none: objects as parsed.
   */
  transform?: ObjectTransform;
}

/** Options of {@link createGuardedInformer}. */
export interface GuardedInformerOptions {
  /** Paging and limits of the list. */
  list?: Omit<
    PagedListOptions,
    'kind' | 'labelSelector' | 'fieldSelector' | 'logger' | 'transform'
  >;
  /** Guards of the watch. */
  watch?: Omit<GuardedWatchOptions, 'kind' | 'logger' | 'transform'>;
  logger?: Logger;
  /** Called after each successful list has been delivered to the informer's callbacks. */
  onListed?: () => void;
}

/** A client-node informer with its object cache, as `makeInformer` returns, plus the resource version. */
export interface GuardedInformer<T> extends ClientNodeInformer<T> {
  get(name: string, namespace?: string): T | undefined;
  list(namespace?: string): ReadonlyArray<T>;
  latestResourceVersion(): string;
  /** Counters of its list (limits hit, see list-pager.ts) and its watch (unknown event types). */
  stats(): { list: ListPagerStats; watch: { unknownEventTypes: number } };
}

/**
 * Builds a client-node `ListWatch` with this package's paged list and {@link GuardedWatch}. It is a
 * plain client-node informer (`on`, `start`, `stop`, `get`, `list`), so an integrator can build one
 * here, use it in their own code, and hand the same instance to the proxy: one list, one watch.
 */
export function createGuardedInformer<T extends KeyedObject>(
  kc: KubeConfig,
  spec: InformerSpec,
  opts: GuardedInformerOptions = {},
): GuardedInformer<T> {
  const logger = componentLogger(opts.logger, `informer:${spec.kind}`);
  const transform = spec.transform ? { transform: spec.transform } : {};
  const watch = new GuardedWatch(kc, { ...opts.watch, kind: spec.kind, logger, ...transform });
  const list = makePagedList<T>(kc, spec.path, {
    ...opts.list,
    kind: spec.kind,
    ...(spec.labelSelector ? { labelSelector: spec.labelSelector } : {}),
    ...(spec.fieldSelector ? { fieldSelector: spec.fieldSelector } : {}),
    ...transform,
    logger,
  });
  const onListed = opts.onListed;
  const listFn = async () => {
    const result = await list();
    // client-node delivers the items synchronously once this promise settles, all within the
    // microtask queue; setImmediate runs after that, so "listed" is only said once it is true.
    if (onListed) setImmediate(onListed);
    return result;
  };
  const lw = new ListWatch<KubernetesObject>(
    spec.path,
    watch,
    listFn as unknown as () => Promise<{ items: KubernetesObject[] }>,
    false,
    spec.labelSelector,
    spec.fieldSelector,
  );
  const inner = lw as unknown as GuardedInformer<T>;
  return {
    on: inner.on.bind(inner),
    off: inner.off.bind(inner),
    get: inner.get.bind(inner),
    list: inner.list.bind(inner),
    latestResourceVersion: () => lw.latestResourceVersion(),
    stats: () => ({ list: list.stats(), watch: watch.stats }),
    start: () => {
      watch.reopen();
      return lw.start();
    },
    stop: async () => {
      await lw.stop();
      watch.close();
    },
  };
}

/** Options of {@link createKubeInformer}. */
export interface KubeInformerOptions<T>
  extends InformerAdapterOptions<T>,
    Omit<GuardedInformerOptions, 'onListed'> {}

/**
 * Builds a guarded client-node informer and its adapter in one step: what the package uses for every
 * informer it owns. The adapter knows the instant the initial list has been delivered.
 */
export function createKubeInformer<T extends KeyedObject>(
  kc: KubeConfig,
  spec: InformerSpec,
  opts: KubeInformerOptions<T> = {},
): { informer: GuardedInformer<T>; adapter: ClientNodeInformerAdapter<T> } {
  let adapter: ClientNodeInformerAdapter<T> | undefined;
  const informer = createGuardedInformer<T>(kc, spec, {
    ...(opts.list ? { list: opts.list } : {}),
    ...(opts.watch ? { watch: opts.watch } : {}),
    ...(opts.logger ? { logger: opts.logger } : {}),
    onListed: () => adapter?.markSynced(),
  });
  adapter = new ClientNodeInformerAdapter<T>(informer, { kind: spec.kind, ...opts });
  return { informer, adapter };
}
