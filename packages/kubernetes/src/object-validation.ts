import diagnosticsChannel from 'node:diagnostics_channel';
import { objectKey as coreObjectKey, type Logger } from '@userspace-proxy/core';
import {
  CHANNELS,
  LOG_MESSAGE_MAX_CHARS,
  logSafe,
  type ObjectRejectedMessage,
} from '@userspace-proxy/core/diagnostics';

/**
 * The structural minimum an object must have before it enters an informer cache: an object with
 * `metadata.name`. Anything less would break the cache's keying (client-node's own cache throws on
 * it, inside an async callback nobody awaits), so it is dropped here, logged and published. Deeper
 * checks (ports, addresses) are core's job, where the object is used.
 */

const rejected = diagnosticsChannel.channel(CHANNELS.objectRejected);

/** A Kubernetes object as far as caching needs it. */
export interface KeyedObject {
  metadata: { name: string; namespace?: string; resourceVersion?: string };
}

/** The reason `value` cannot be cached, or `undefined` when it can. */
export function structuralProblem(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'not an object';
  const metadata = (value as { metadata?: unknown }).metadata;
  if (typeof metadata !== 'object' || metadata === null) return 'no metadata';
  const { name, namespace } = metadata as { name?: unknown; namespace?: unknown };
  if (typeof name !== 'string' || name === '') return 'no metadata.name';
  if (namespace !== undefined && namespace !== null && typeof namespace !== 'string') {
    return 'metadata.namespace is not a string';
  }
  return undefined;
}

/** The cache key client-go uses: "namespace/name", or "name" for cluster-scoped objects. */
export function objectKey(obj: KeyedObject): string {
  const ns = obj.metadata.namespace;
  // Core's key for a namespaced object is the same string, made so that keys share their
  // "namespace/" part (core's namespacedKey).
  return ns ? coreObjectKey(obj) : obj.metadata.name;
}

/** A best-effort key for an object that failed {@link structuralProblem}, for the log line. */
function roughKey(value: unknown): string {
  try {
    const md = (value as { metadata?: { name?: unknown; namespace?: unknown } }).metadata;
    const name = typeof md?.name === 'string' ? md.name : '?';
    return typeof md?.namespace === 'string' ? `${md.namespace}/${name}` : name;
  } catch {
    return '?';
  }
}

/** Logs and publishes a rejected object; never throws. */
export function reportRejected(logger: Logger, kind: string, value: unknown, reason: string): void {
  // Name, namespace and reason come from the object: escaped and cut, for the log and the channel.
  const message: ObjectRejectedMessage = {
    kind: logSafe(kind),
    key: logSafe(roughKey(value)),
    reason: logSafe(reason, LOG_MESSAGE_MAX_CHARS),
  };
  logger.warn(`ignoring ${message.kind} ${message.key}: ${message.reason}`);
  if (rejected.hasSubscribers) rejected.publish(message);
}

/** True when `value` is cacheable; otherwise reports it and returns false. */
export function acceptObject(logger: Logger, kind: string, value: unknown): value is KeyedObject {
  const problem = structuralProblem(value);
  if (problem === undefined) return true;
  reportRejected(logger, kind, value, problem);
  return false;
}
