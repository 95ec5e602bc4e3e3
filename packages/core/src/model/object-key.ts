/**
 * "namespace/name" keys, the identity of an object in every informer store and config fan-out. They
 * are computed the same way everywhere so that a store, the fan-out's delivered-object map and the
 * Proxier agree on which events belong to one object.
 */

/**
 * The namespace of an object that names none, as the API server defaults it. Manifest files often
 * leave it out; validation fills it in so every later component sees the same key.
 */
export const DEFAULT_NAMESPACE = 'default';

/** "namespace/" per namespace seen, so that keys share it (see {@link namespacedKey}). */
const prefixes = new Map<string, string>();
/** Past this many namespaces the prefix cache starts over: bounded whatever the input. */
const MAX_PREFIXES = 4096;

/**
 * `${namespace}/${name}`, made so that every key of one namespace shares its "namespace/" part: a
 * template makes a fresh "namespace/" string for each key before joining the name (24 bytes or more
 * each, 3 MB for the 128 000 keys the stores, the fan-out, the merger and the balancer hold at
 * 10 000 Services). The result is equal to the template's, so it can key any map.
 */
export function namespacedKey(namespace: string, name: string): string {
  let prefix = prefixes.get(namespace);
  if (prefix === undefined) {
    if (prefixes.size >= MAX_PREFIXES) prefixes.clear();
    prefix = `${namespace}/`;
    prefixes.set(namespace, prefix);
  }
  return prefix + name;
}

/** The identity of an object: its namespace (defaulted), its name and their "ns/name" key. */
export interface ObjectName {
  /** The namespace, {@link DEFAULT_NAMESPACE} when the object names none. */
  namespace: string;
  /** `metadata.name`. */
  name: string;
  /** "namespace/name". */
  key: string;
}

/**
 * The namespace, name and "ns/name" key of an object, or undefined when it has no usable identity (no
 * object, no `metadata`, a `metadata.name` that is not a non-empty string, or a namespace that is not
 * a string). Never throws, whatever is passed: stores and the load balancer use it on untrusted
 * input. An absent, null or "" namespace is {@link DEFAULT_NAMESPACE}.
 */
export function tryObjectName(obj: unknown): ObjectName | undefined {
  try {
    if (typeof obj !== 'object' || obj === null) return undefined;
    const metadata: unknown = (obj as { metadata?: unknown }).metadata;
    if (typeof metadata !== 'object' || metadata === null) return undefined;
    const { name, namespace } = metadata as { name?: unknown; namespace?: unknown };
    if (typeof name !== 'string' || name === '') return undefined;
    const ns = namespace === undefined || namespace === null ? '' : namespace;
    if (typeof ns !== 'string') return undefined;
    const resolved = ns === '' ? DEFAULT_NAMESPACE : ns;
    return { namespace: resolved, name, key: namespacedKey(resolved, name) };
  } catch {
    // A getter or proxy trap threw: such an object has no identity we can trust.
    return undefined;
  }
}

/**
 * The "ns/name" key of an object, or undefined when it has no usable identity (see
 * {@link tryObjectName}). Never throws, whatever is passed: stores use it on untrusted input before
 * any validation.
 */
export function tryObjectKey(obj: unknown): string | undefined {
  return tryObjectName(obj)?.key;
}

/**
 * The "ns/name" key of an object, for logs and for objects already validated (whose key always
 * exists). An object without a usable identity gives {@link UNKNOWN_KEY}; key maps with
 * {@link tryObjectKey} instead, so that two such objects never share an entry.
 */
export function objectKey(obj: unknown): string {
  return tryObjectKey(obj) ?? UNKNOWN_KEY;
}

/** What {@link objectKey} returns for an object it cannot name; never a valid key (no "/"). */
export const UNKNOWN_KEY = '<unknown>';

/**
 * Splits a key made by {@link objectKey} at its first "/" (names never contain one; namespaces
 * never do either). Returns undefined for a string that is not a key, so a caller can reject it.
 */
export function splitObjectKey(key: string): { namespace: string; name: string } | undefined {
  const slash = key.indexOf('/');
  if (slash <= 0 || slash === key.length - 1) return undefined;
  return { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}
