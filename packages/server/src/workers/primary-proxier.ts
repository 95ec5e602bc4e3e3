import {
  type DrainResult,
  type EndpointSlice,
  type Endpoints,
  type EventRecorder,
  objectKey,
  type Proxier,
  type Service,
  type ServiceInfo,
} from '@userspace-proxy/core';
import { channels } from '@userspace-proxy/core/diagnostics';
import type { UnidleHook } from '@userspace-proxy/idler';
import type { KubeProxyConfiguration } from '../config-schema.js';
import { serviceFor } from './placement.js';
import type { WorkerPool } from './pool.js';
import type { ForwardedKinds, FromWorker, ObjectOp, ToWorker } from './protocol.js';

/**
 * The Proxier of a `--workers` primary: it serves nothing itself. Registered on the daemon's config
 * fan-out like any Proxier, it keeps the validated objects and forwards each change to every ready
 * worker (a Service as placement.ts shapes it for that worker), and gives a worker that becomes
 * ready the whole state. It turns the workers' syncs into one `sync` on the primary's channel once
 * every ready worker has synced since the last change, so /healthz and the sync metrics reflect all
 * workers, and it publishes a `serviceChange` per forwarded Service change, as a Proxier does.
 */

/** How long a stop waits for the workers beyond their drain timeout before killing them. */
export const WORKER_STOP_GRACE_MS = 5000;

/** What the primary Proxier needs beside its pool. */
export interface PrimaryProxierOptions {
  config: KubeProxyConfiguration;
  kinds: ForwardedKinds;
  /** The source's raw node IPs, read when a worker starts. */
  nodeIPs?: () => string[] | undefined;
  recorder?: EventRecorder;
  unidler?: UnidleHook;
}

type Kind = 'service' | 'slice' | 'endpoints';

/** Forwards state to workers; a Proxier to the daemon. */
export class PrimaryProxier implements Proxier {
  readonly mode = 'service-port-portal' as const;
  #pool: WorkerPool | undefined;
  readonly #o: PrimaryProxierOptions;
  readonly #services = new Map<string, Service>();
  readonly #slices = new Map<string, EndpointSlice>();
  readonly #endpoints = new Map<string, Endpoints>();
  readonly #synced = new Set<Kind>();
  /** Workers that have synced since the last change forwarded. */
  readonly #current = new Set<number>();
  #servicePorts = 0;
  #initialized = false;
  #stopped: Promise<DrainResult> | undefined;

  constructor(options: PrimaryProxierOptions) {
    this.#o = options;
  }

  /** Attaches the pool (made after this, since its callbacks call here). */
  attach(pool: WorkerPool): void {
    this.#pool = pool;
  }

  /** A worker is ready: everything it must know, in order. */
  onReady(index: number, send: (message: ToWorker) => void): void {
    this.#current.delete(index);
    const nodeIPs = this.#o.nodeIPs?.();
    send({
      type: 'up:init',
      index,
      config: this.#o.config,
      kinds: this.#o.kinds,
      ...(nodeIPs ? { nodeIPs } : {}),
      unidler: this.#o.unidler !== undefined,
    });
    const idling = { idling: this.#o.config.userspaceProxy.idling };
    for (const s of this.#services.values()) {
      const view = serviceFor(s, index, idling);
      if (view) send({ type: 'up:service', op: 'add', obj: view });
    }
    for (const obj of this.#slices.values()) send({ type: 'up:slice', op: 'add', obj });
    for (const obj of this.#endpoints.values()) send({ type: 'up:endpoints', op: 'add', obj });
    for (const kind of this.#synced) send({ type: 'up:synced', kind });
  }

  /** A worker's report. */
  onMessage(index: number, m: FromWorker): void {
    switch (m.type) {
      case 'up:sync':
        if (index === 0) this.#servicePorts = m.servicePorts;
        this.#current.add(index);
        this.#publishIfCurrent(m.durationMs);
        return;
      case 'up:event':
        this.#o.recorder?.event(m.ref, m.eventType, m.reason, m.message);
        return;
      case 'up:need-pods':
        this.#o.unidler?.needPods(m.request);
        return;
      default:
        return;
    }
  }

  /** A worker went away: nobody waits for it. */
  onExit(index: number): void {
    this.#current.delete(index);
  }

  /** A sync, on the primary's channel, once every ready worker has applied every change. */
  #publishIfCurrent(durationMs: number): void {
    const ready = this.#pool?.readyIndexes() ?? [];
    if (ready.length === 0 || !ready.every((i) => this.#current.has(i))) return;
    if (this.#synced.has('service') && this.#synced.size >= 2) this.#initialized = true;
    if (channels.sync.hasSubscribers) {
      channels.sync.publish({ durationMs, changes: 0, servicePorts: this.#servicePorts });
    }
  }

  #changed(): void {
    this.#current.clear();
  }

  #broadcast(message: ToWorker): void {
    for (const i of this.#pool?.readyIndexes() ?? []) this.#pool?.send(i, message);
  }

  #service(op: ObjectOp<Service>): void {
    const key = objectKey(op.obj);
    if (op.op === 'delete') this.#services.delete(key);
    else this.#services.set(key, op.obj);
    this.#changed();
    if (channels.serviceChange.hasSubscribers) channels.serviceChange.publish({ service: key });
    const idling = { idling: this.#o.config.userspaceProxy.idling };
    for (const i of this.#pool?.readyIndexes() ?? []) {
      const before =
        op.op === 'add' ? undefined : serviceFor(op.op === 'update' ? op.old : op.obj, i, idling);
      const after = op.op === 'delete' ? undefined : serviceFor(op.obj, i, idling);
      let message: ToWorker | undefined;
      if (before && after) message = { type: 'up:service', op: 'update', old: before, obj: after };
      else if (after) message = { type: 'up:service', op: 'add', obj: after };
      else if (before) message = { type: 'up:service', op: 'delete', obj: before };
      if (message) this.#pool?.send(i, message);
    }
  }

  #store<T>(map: Map<string, T>, op: ObjectOp<T>): void {
    const key = objectKey(op.obj);
    if (op.op === 'delete') map.delete(key);
    else map.set(key, op.obj);
    this.#changed();
  }

  #markSynced(kind: Kind): void {
    this.#synced.add(kind);
    this.#broadcast({ type: 'up:synced', kind });
  }

  onServiceAdd(obj: Service): void {
    this.#service({ op: 'add', obj });
  }
  onServiceUpdate(old: Service, obj: Service): void {
    this.#service({ op: 'update', old, obj });
  }
  onServiceDelete(obj: Service): void {
    this.#service({ op: 'delete', obj });
  }
  onServiceSynced(): void {
    this.#markSynced('service');
  }
  onEndpointSliceAdd(obj: EndpointSlice): void {
    this.#store(this.#slices, { op: 'add', obj });
    this.#broadcast({ type: 'up:slice', op: 'add', obj });
  }
  onEndpointSliceUpdate(old: EndpointSlice, obj: EndpointSlice): void {
    this.#store(this.#slices, { op: 'update', old, obj });
    this.#broadcast({ type: 'up:slice', op: 'update', old, obj });
  }
  onEndpointSliceDelete(obj: EndpointSlice): void {
    this.#store(this.#slices, { op: 'delete', obj });
    this.#broadcast({ type: 'up:slice', op: 'delete', obj });
  }
  onEndpointSlicesSynced(): void {
    this.#markSynced('slice');
  }
  onEndpointsAdd(obj: Endpoints): void {
    this.#store(this.#endpoints, { op: 'add', obj });
    this.#broadcast({ type: 'up:endpoints', op: 'add', obj });
  }
  onEndpointsUpdate(old: Endpoints, obj: Endpoints): void {
    this.#store(this.#endpoints, { op: 'update', old, obj });
    this.#broadcast({ type: 'up:endpoints', op: 'update', old, obj });
  }
  onEndpointsDelete(obj: Endpoints): void {
    this.#store(this.#endpoints, { op: 'delete', obj });
    this.#broadcast({ type: 'up:endpoints', op: 'delete', obj });
  }
  onEndpointsSynced(): void {
    this.#markSynced('endpoints');
  }

  /** The workers sync themselves. */
  sync(): void {}

  /** Nothing to loop: resolves when `signal` aborts. */
  syncLoop(signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal === undefined) return;
      if (signal.aborted) resolve();
      signal.addEventListener('abort', () => resolve(), { once: true });
    });
  }

  /** The primary has no portals; the status page asks the workers. */
  getServiceInfo(): ServiceInfo | undefined {
    return undefined;
  }
  serviceInfos(): ServiceInfo[] {
    return [];
  }
  isInitialized(): boolean {
    return this.#initialized;
  }
  pendingChanges(): number {
    return 0;
  }

  /** Each worker drains for its own drain timeout and exits; resolves once all have exited. */
  drain(deadlineMs: number): Promise<DrainResult> {
    this.#stopped ??= this.#stop(deadlineMs > 0, deadlineMs + WORKER_STOP_GRACE_MS);
    return this.#stopped;
  }

  async #stop(drain: boolean, waitMs: number): Promise<DrainResult> {
    const pool = this.#pool;
    if (pool === undefined) return { remaining: 0, timedOut: false };
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      pool.stop(drain).then(() => false),
      new Promise<boolean>((r) => {
        timer = setTimeout(() => r(true), waitMs);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) pool.kill();
    return { remaining: 0, timedOut };
  }

  /** After a drain (or instead of one): the workers stop at once; any still running is killed. */
  async shutdown(): Promise<void> {
    const pool = this.#pool;
    if (pool === undefined) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      pool.stop(false),
      new Promise<void>((r) => {
        timer = setTimeout(r, WORKER_STOP_GRACE_MS);
      }),
    ]);
    clearTimeout(timer);
    pool.kill();
  }
}
