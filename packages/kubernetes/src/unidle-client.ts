import {
  AppsV1Api,
  CoreV1Api,
  type KubeConfig,
  Observable,
  type V1Scale,
} from '@kubernetes/client-node';
import type { UnidleTargetKind } from './unidle-targets.js';

/**
 * The API calls the Kubernetes unidler makes. The default ({@link clientNodeUnidleClient}) uses
 * client-node's AppsV1Api and CoreV1Api; a test or an integrator with another transport provides their
 * own. Implementations reject with an error carrying the HTTP status in `statusCode` (or client-node's
 * `code`) when the server answered, and stop when `signal` aborts.
 */
export interface UnidleClient {
  /** GET /apis/apps/v1/namespaces/{ns}/{deployments|statefulsets|replicasets}/{name}/scale. */
  readScale(
    kind: UnidleTargetKind,
    namespace: string,
    name: string,
    signal?: AbortSignal,
  ): Promise<ScaleObject>;
  /**
   * PUT …/scale with `scale` (as read, with `spec.replicas` changed). Its `metadata.resourceVersion`
   * makes the write conditional: the server answers 409 if the workload changed since the read, so a
   * scale-up can never undo someone else's decision.
   */
  replaceScale(
    kind: UnidleTargetKind,
    namespace: string,
    name: string,
    scale: ScaleObject,
    signal?: AbortSignal,
  ): Promise<void>;
  /** PATCH /api/v1/namespaces/{ns}/services/{name} with a JSON patch (only with `clearAnnotations`). */
  patchService(
    namespace: string,
    name: string,
    ops: JsonPatchOperation[],
    signal?: AbortSignal,
  ): Promise<void>;
}

/** The fields of an autoscaling/v1 Scale the unidler reads and writes (a client-node V1Scale fits). */
export interface ScaleObject {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; resourceVersion?: string; uid?: string };
  /** `replicas` is omitted by the server when it is 0. */
  spec?: { replicas?: number };
  status?: { replicas?: number; selector?: string };
}

/** One RFC 6902 operation, of the kinds the unidler sends. */
export type JsonPatchOperation =
  | { op: 'test' | 'replace'; path: string; value: unknown }
  | { op: 'remove'; path: string };

/** Options that make one client-node call stop when `signal` aborts. */
function withSignal(signal: AbortSignal | undefined) {
  if (!signal) return undefined;
  return {
    middleware: [
      {
        pre: (ctx: { setSignal(s: AbortSignal): void }) => {
          ctx.setSignal(signal);
          return new Observable(Promise.resolve(ctx));
        },
        post: <T>(res: T) => new Observable(Promise.resolve(res)),
      },
    ],
    middlewareMergeStrategy: 'append' as const,
    // biome-ignore lint/suspicious/noExplicitAny: client-node's generated option types are not exported by name
  } as any;
}

/** The UnidleClient over `@kubernetes/client-node` 1.4: AppsV1Api `*Scale` calls and CoreV1Api. */
export function clientNodeUnidleClient(kc: KubeConfig): UnidleClient {
  const apps = kc.makeApiClient(AppsV1Api);
  const core = kc.makeApiClient(CoreV1Api);
  return {
    readScale(kind, namespace, name, signal) {
      const options = withSignal(signal);
      switch (kind) {
        case 'Deployment':
          return apps.readNamespacedDeploymentScale({ name, namespace }, options);
        case 'StatefulSet':
          return apps.readNamespacedStatefulSetScale({ name, namespace }, options);
        case 'ReplicaSet':
          return apps.readNamespacedReplicaSetScale({ name, namespace }, options);
      }
    },
    async replaceScale(kind, namespace, name, scale, signal) {
      const body = scale as V1Scale;
      const options = withSignal(signal);
      switch (kind) {
        case 'Deployment':
          await apps.replaceNamespacedDeploymentScale({ name, namespace, body }, options);
          return;
        case 'StatefulSet':
          await apps.replaceNamespacedStatefulSetScale({ name, namespace, body }, options);
          return;
        case 'ReplicaSet':
          await apps.replaceNamespacedReplicaSetScale({ name, namespace, body }, options);
          return;
      }
    },
    async patchService(namespace, name, ops, signal) {
      // JSON patch is the generated client's default content type for patch calls.
      await core.patchNamespacedService({ name, namespace, body: ops }, withSignal(signal));
    },
  };
}
