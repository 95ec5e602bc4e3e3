import type { ValidationResult } from '@userspace-proxy/core';

/**
 * What the package's informers do to each object between parsing it and caching it: drop what the
 * proxy never reads, and cache core's validated copy instead of the parsed one, so that the informer,
 * its adapter and core's config fan-out hold one object per key, not two (the fan-out delivers a
 * validator's copy as it is: `ValidateOptions.reuse`). At 10 000 Services and 100 000 endpoints that
 * second copy was some 40 MB of the daemon's heap.
 */

/** The annotation `kubectl apply` writes: the whole object again, as JSON text. */
export const LAST_APPLIED_ANNOTATION = 'kubectl.kubernetes.io/last-applied-configuration';

/** A function an informer applies to every listed or watched object before caching it. */
export type ObjectTransform = (obj: unknown) => unknown;

/**
 * Removes `metadata.managedFields` (server-side apply's bookkeeping, often larger than the object)
 * and the last-applied annotation, as kube-proxy's informers do with their transform. It changes
 * `obj` in place: it is meant for objects the informer has just parsed and nobody else holds. Never
 * throws; anything that is not an object is left alone.
 */
export function stripUnreadFields(obj: unknown): unknown {
  try {
    const metadata = (obj as { metadata?: unknown } | null)?.metadata;
    if (typeof metadata !== 'object' || metadata === null) return obj;
    const md = metadata as { managedFields?: unknown; annotations?: unknown };
    if ('managedFields' in md) delete md.managedFields;
    const annotations = md.annotations;
    if (typeof annotations === 'object' && annotations !== null) {
      delete (annotations as Record<string, unknown>)[LAST_APPLIED_ANNOTATION];
    }
  } catch {
    // A hostile object: validation downstream reports it.
  }
  return obj;
}

/**
 * A transform that strips (see {@link stripUnreadFields}) and then validates with one of core's
 * validators: a valid object is replaced by the validator's copy, which is what the informer caches
 * and what core's config fan-out delivers without copying again. An invalid one is cached as parsed,
 * so the fan-out rejects and reports it exactly as before (nothing is reported here).
 */
export function validatingTransform<T>(
  validate: (obj: unknown) => ValidationResult<T>,
): ObjectTransform {
  return (obj) => {
    stripUnreadFields(obj);
    const result = validate(obj);
    return result.ok ? result.value : obj;
  };
}
