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
    if (!result.ok) return obj;
    const out = result.value as { apiVersion?: unknown; kind?: unknown };
    if ('apiVersion' in out) out.apiVersion = shared(out.apiVersion);
    if ('kind' in out) out.kind = shared(out.kind);
    return result.value;
  };
}

/** Past this many distinct values the string table starts over: bounded whatever the input. */
const MAX_SHARED_STRINGS = 8192;
const sharedStrings = new Map<string, string>();

/**
 * One string per value for fields that repeat across objects (`apiVersion`, `kind`, an endpoint's
 * `nodeName` and `zone`): JSON.parse makes a new string for each occurrence, 24–40 bytes each, 100
 * 000 node names at 100 000 endpoints. Anything but a short string comes back as it is.
 */
function shared(value: unknown): unknown {
  if (typeof value !== 'string' || value.length > 253) return value;
  const known = sharedStrings.get(value);
  if (known !== undefined) return known;
  if (sharedStrings.size >= MAX_SHARED_STRINGS) sharedStrings.clear();
  sharedStrings.set(value, value);
  return value;
}

const CONDITION_FIELDS = ['ready', 'serving', 'terminating'] as const;

/** One frozen object per combination of endpoint conditions seen (at most 27). */
const sharedConditions = new Map<string, Readonly<Record<string, boolean>>>();

/**
 * The shared, frozen equivalent of an endpoint's `conditions`: only for a plain object whose fields
 * are among ready, serving and terminating, each a boolean; anything else comes back as it is.
 */
function shareConditions(conditions: unknown): unknown {
  if (typeof conditions !== 'object' || conditions === null) return conditions;
  if (Object.getPrototypeOf(conditions) !== Object.prototype) return conditions;
  const rec = conditions as Record<string, unknown>;
  const keys = Object.keys(rec);
  if (keys.length > CONDITION_FIELDS.length) return conditions;
  for (const k of keys) {
    if (!(CONDITION_FIELDS as readonly string[]).includes(k) || typeof rec[k] !== 'boolean') {
      return conditions;
    }
  }
  const id = CONDITION_FIELDS.map((k) => (k in rec ? String(rec[k]) : '-')).join(',');
  let shared = sharedConditions.get(id);
  if (shared === undefined) {
    const fresh: Record<string, boolean> = {};
    for (const k of CONDITION_FIELDS) if (k in rec) fresh[k] = rec[k] as boolean;
    shared = Object.freeze(fresh);
    sharedConditions.set(id, shared);
  }
  return shared;
}

/**
 * {@link validatingTransform} for EndpointSlices, plus: the `conditions` of each endpoint in the
 * validated copy are replaced by one shared, frozen object per combination (nearly every endpoint
 * of a cluster says `{ ready: true, serving: true, terminating: false }`): about 50 bytes per
 * endpoint; and each `nodeName` and `zone` is one shared string per value. Handlers must not change what they are given (core's cache mutation detector reports
 * it); a shared object cannot be changed at all.
 */
export function endpointSliceTransform(
  validate: (obj: unknown) => ValidationResult<{ endpoints?: unknown }>,
): ObjectTransform {
  const base = validatingTransform(validate);
  return (obj) => {
    const out = base(obj);
    if (out === obj) return out; // invalid: left as parsed
    const endpoints = (out as { endpoints?: unknown }).endpoints;
    if (Array.isArray(endpoints)) {
      for (const endpoint of endpoints as Record<string, unknown>[]) {
        if ('conditions' in endpoint) endpoint.conditions = shareConditions(endpoint.conditions);
        if ('nodeName' in endpoint) endpoint.nodeName = shared(endpoint.nodeName);
        if ('zone' in endpoint) endpoint.zone = shared(endpoint.zone);
      }
    }
    return out;
  };
}
