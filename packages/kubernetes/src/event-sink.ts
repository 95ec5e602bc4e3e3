import { CoreV1Api, type CoreV1Event, type KubeConfig } from '@kubernetes/client-node';
import type { CoreV1EventBody, EventPatch } from './event-correlator.js';

/**
 * Where the Kubernetes event recorder writes. The default talks to the API with client-node; a test
 * or an integrator with another transport provides their own. Implementations reject with an error
 * carrying the HTTP status in `statusCode` (or client-node's `code`) when the server answered.
 */
export interface EventSink {
  /** POST /api/v1/namespaces/{ns}/events. */
  create(event: CoreV1EventBody): Promise<void>;
  /** Updates count, lastTimestamp and message of an Event written before. */
  patch(namespace: string, name: string, patch: EventPatch): Promise<void>;
}

/** The HTTP status an error carries, if the server answered at all. */
export function statusOf(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { statusCode, code } = err as { statusCode?: unknown; code?: unknown };
  if (typeof statusCode === 'number') return statusCode;
  if (typeof code === 'number') return code;
  return undefined;
}

/**
 * Writes core/v1 Events with client-node's CoreV1Api. Patches are JSON patches (the generated
 * client's default content type), replacing the three fields a repeat changes.
 */
export function clientNodeEventSink(kc: KubeConfig): EventSink {
  const api = kc.makeApiClient(CoreV1Api);
  return {
    async create(event) {
      await api.createNamespacedEvent({
        namespace: event.metadata.namespace,
        body: event as unknown as CoreV1Event,
      });
    },
    async patch(namespace, name, patch) {
      await api.patchNamespacedEvent({
        namespace,
        name,
        body: [
          { op: 'replace', path: '/count', value: patch.count },
          { op: 'replace', path: '/lastTimestamp', value: patch.lastTimestamp },
          { op: 'replace', path: '/message', value: patch.message },
        ],
      });
    },
  };
}
