import { isIP } from 'node:net';
import { componentLogger, type Logger, type SharedInformer } from '@userspace-proxy/core';

/** The fields of core/v1 Node this package reads. */
export interface NodeLike {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    resourceVersion?: string;
    /** A string from the watch, a Date from client-node's typed clients: either means "being deleted". */
    deletionTimestamp?: string | Date | null;
  };
  spec?: { taints?: { key?: string; value?: string; effect?: string }[] | null };
  status?: { addresses?: { type?: string; address?: string }[] | null };
}

/** The taint the cluster autoscaler puts on a node it is about to remove (KEP-3836). */
export const TO_BE_DELETED_TAINT = 'ToBeDeletedByClusterAutoscaler';

/**
 * The node's primary IPs as kube-proxy picks them: InternalIPs before ExternalIPs, the first one
 * found, then the first of the other family (dual stack). Invalid addresses are skipped.
 */
export function nodeIPsOf(node: NodeLike | undefined): string[] {
  const addresses = Array.isArray(node?.status?.addresses) ? node.status.addresses : [];
  const ofType = (type: string) =>
    addresses
      .filter((a) => a?.type === type && typeof a.address === 'string' && isIP(a.address) !== 0)
      .map((a) => a.address as string);
  const all = [...ofType('InternalIP'), ...ofType('ExternalIP')];
  const first = all[0];
  if (first === undefined) return [];
  const other = all.find((ip) => isIP(ip) !== isIP(first));
  return other === undefined ? [first] : [first, other];
}

/**
 * Whether load balancers should send traffic to this node (`/healthz`): not when the Node is being
 * deleted or carries the autoscaler's deletion taint, and not when it is unknown (newer kube-proxy).
 */
export function isNodeEligible(node: NodeLike | undefined): boolean {
  if (!node) return false;
  if (node.metadata.deletionTimestamp) return false;
  const taints = Array.isArray(node.spec?.taints) ? node.spec.taints : [];
  return !taints.some((t) => t?.key === TO_BE_DELETED_TAINT);
}

/**
 * Follows this proxy's own Node through an informer: its IPs for the `primary` node-port keyword,
 * and its eligibility for `/healthz`. The last known Node is kept while the API server is
 * unreachable, so losing the API server changes neither.
 */
export class NodeInfo {
  readonly #nodeName: string;
  readonly #log: Logger;
  readonly #listeners = new Set<() => void>();
  #node: NodeLike | undefined;

  constructor(informer: SharedInformer<NodeLike>, nodeName: string, logger?: Logger) {
    this.#nodeName = nodeName;
    this.#log = componentLogger(logger, 'node-info');
    informer.addEventHandler({
      onAdd: (n) => this.#set(n),
      onUpdate: (_old, n) => this.#set(n),
      onDelete: (n) => {
        const node = 'key' in n && 'obj' in n ? n.obj : (n as NodeLike);
        if (node?.metadata?.name !== this.#nodeName) return;
        this.#log.warn(`Node ${this.#nodeName} was deleted`);
        this.#node = undefined;
        this.#notify();
      },
    });
  }

  #set(node: NodeLike): void {
    if (node?.metadata?.name !== this.#nodeName) return;
    const before = this.#node;
    this.#node = node;
    const ips = nodeIPsOf(node).join(',');
    if (!before || nodeIPsOf(before).join(',') !== ips) {
      this.#log.info(`Node ${this.#nodeName} IPs: ${ips || 'none'}`);
    }
    if (isNodeEligible(before) !== isNodeEligible(node)) {
      this.#log.info(`Node ${this.#nodeName} eligible for traffic: ${isNodeEligible(node)}`);
    }
    this.#notify();
  }

  #notify(): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener();
      } catch (err) {
        this.#log.error('a Node change listener threw; the others carry on', err);
      }
    }
  }

  /**
   * Calls `listener` after every change of the Node (first seen, updated, deleted), so that a user of
   * its IPs, which are read once when a Proxier is built, can tell when they no longer hold. Returns
   * the function that removes the listener.
   */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Resolves true once the Node is known (at once if it is already), or false when `signal` aborts
   * first: how a caller waits, bounded, for the node's IPs before it builds what needs them.
   */
  whenKnown(signal: AbortSignal): Promise<boolean> {
    return new Promise((resolve) => {
      if (this.#node) return resolve(true);
      if (signal.aborted) return resolve(false);
      const done = (known: boolean) => {
        remove();
        signal.removeEventListener('abort', onAbort);
        resolve(known);
      };
      const onAbort = () => done(false);
      const remove = this.onChange(() => {
        if (this.#node) done(true);
      });
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** The last known Node object, if any. */
  node(): NodeLike | undefined {
    return this.#node;
  }

  /** The node's primary IPs; empty until the Node is known. */
  nodeIPs(): string[] {
    return nodeIPsOf(this.#node);
  }

  /** False while the Node is unknown, being deleted, or tainted for deletion by the autoscaler. */
  nodeEligible(): boolean {
    return isNodeEligible(this.#node);
  }
}
