import { InvalidObjectError } from '../errors.js';
import { quoteForLog } from './log-safe.js';
import { DEFAULT_NAMESPACE, UNKNOWN_KEY } from './object-key.js';

/**
 * The machinery behind validation.ts: copying untrusted values level by level, collecting problems
 * with their field paths, describing bad values without running user code, and the checks shared by
 * every kind (metadata, string maps), and what makes a validator (`validator`). Internal: the public
 * surface is validation.ts.
 */

/** The outcome of a validator: the normalised copy, or the reason it was refused. */
export type ValidationResult<T> = { ok: true; value: T } | { ok: false; error: InvalidObjectError };

/** Options of the validators. */
export interface ValidateOptions {
  /**
   * Give back, unchanged and without a second check, an object that a validator of the same kind
   * returned: the objects a config fan-out delivers. The Proxier passes it, so an object is checked
   * and copied once on its way from the informer to the load balancer, not twice. Default false:
   * every call checks and copies. An object changed after its validation is not checked again, which
   * is one more reason handlers must never change what they are given (see cache mutation detection).
   */
  reuse?: boolean;
}

/** A plain object as validation sees it, before it is known to have any shape. */
export type Rec = Record<string, unknown>;

/** At most this many problems are named in one error, so a garbage object cannot flood the logs. */
const MAX_REASONS = 5;
/** Strings quoted in messages are cut to this length, for the same reason. */
const MAX_QUOTED = 64;

/** A DNS-1123 label: what Kubernetes allows for namespaces and port names. */
export const DNS1123_LABEL = /^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?$/;
/** A DNS-1123 subdomain: what Kubernetes allows for object names and FQDN endpoints. */
export const DNS1123_SUBDOMAIN =
  /^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$/;

/** Kind of every copy a validator returned, so a consumer downstream can skip a second check. */
const validatedKinds = new WeakMap<object, string>();

/** True when `obj` is a copy a validator of `kind` returned (see ValidateOptions.reuse). */
function wasValidated(obj: unknown, kind: string): boolean {
  return typeof obj === 'object' && obj !== null && validatedKinds.get(obj) === kind;
}

/** `path.field`, or just `field` at the top of the object. */
export function at(path: string, field: string): string {
  return path === '' ? field : `${path}.${field}`;
}

/** Collects problems as "path: message" lines; validation goes on after the first so users see more. */
export class Problems {
  /** Every problem found, as "path: message". */
  readonly list: string[] = [];

  /** Records one problem at a field path. */
  add(path: string, message: string): void {
    this.list.push(`${path}: ${message}`);
  }

  /** The first few problems, joined: the reason an InvalidObjectError carries. */
  reason(): string {
    const shown = this.list.slice(0, MAX_REASONS).join('; ');
    const more = this.list.length - MAX_REASONS;
    return more > 0 ? `${shown}; and ${more} more problem(s)` : shown;
  }
}

/**
 * A short, log-safe description of any value: never calls user code (toString, getters), cuts long
 * strings and quotes them (so a newline cannot forge a log line).
 */
export function describe(value: unknown): string {
  switch (typeof value) {
    case 'undefined':
      return 'nothing';
    case 'string':
      return quoteForLog(value, MAX_QUOTED);
    case 'number':
    case 'boolean':
    case 'bigint':
      return String(value);
    case 'symbol':
      return 'a symbol';
    case 'function':
      return 'a function';
    default:
      if (value === null) return 'null';
      try {
        return Array.isArray(value) ? 'an array' : 'an object';
      } catch {
        return 'an unreadable object';
      }
  }
}

function errorName(err: unknown): string {
  return err instanceof Error ? err.name : 'a thrown value';
}

/** True for null and undefined, which both mean "absent" for an optional field (YAML gives null). */
export function absent(value: unknown): value is null | undefined {
  return value === undefined || value === null;
}

/** A shallow copy of a plain object, or undefined (with a problem) for anything else. */
export function copyRecord(value: unknown, path: string, p: Problems): Rec | undefined {
  try {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      p.add(path, `must be an object, got ${describe(value)}`);
      return undefined;
    }
    const copy: Rec = { ...value };
    for (const key of Object.keys(copy)) if (copy[key] === null) delete copy[key];
    return copy;
  } catch (err) {
    p.add(path, `could not be read (${errorName(err)})`);
    return undefined;
  }
}

/** A copy of an array, or undefined (with a problem) for anything else. */
export function copyArray(value: unknown, path: string, p: Problems): unknown[] | undefined {
  try {
    if (!Array.isArray(value)) {
      p.add(path, `must be an array, got ${describe(value)}`);
      return undefined;
    }
    const length = value.length;
    const copy: unknown[] = new Array(length);
    for (let i = 0; i < length; i++) copy[i] = value[i];
    return copy;
  } catch (err) {
    p.add(path, `could not be read (${errorName(err)})`);
    return undefined;
  }
}

/** An array of shallow-copied objects; entries that are not objects are reported by index. */
function copyRecords(value: unknown, path: string, p: Problems): Rec[] | undefined {
  const items = copyArray(value, path, p);
  if (!items) return undefined;
  const out: Rec[] = [];
  items.forEach((item, i) => {
    const copy = copyRecord(item, `${path}[${i}]`, p);
    if (copy) out.push(copy);
  });
  return out.length === items.length ? out : undefined;
}

/** Replaces `rec[field]` with a copied array of objects when present. */
export function recordsField(
  rec: Rec,
  field: string,
  path: string,
  p: Problems,
): Rec[] | undefined {
  if (absent(rec[field])) return undefined;
  const copy = copyRecords(rec[field], at(path, field), p);
  if (copy) rec[field] = copy;
  return copy;
}

/** Replaces `rec[field]` with a shallow copy of the object it holds, when present. */
export function recordField(rec: Rec, field: string, path: string, p: Problems): Rec | undefined {
  if (absent(rec[field])) return undefined;
  const copy = copyRecord(rec[field], at(path, field), p);
  if (copy) rec[field] = copy;
  return copy;
}

/**
 * The longest string accepted in a free-form field (uid, resourceVersion, hostnames, node names):
 * the API's longest name, so a megabyte string is refused before anything copies or logs it.
 */
export const MAX_FIELD_LENGTH = 253;

/** Records a problem when `rec[field]` is present and not a string of at most `max` characters. */
export function checkString(
  rec: Rec,
  field: string,
  path: string,
  p: Problems,
  max = MAX_FIELD_LENGTH,
): void {
  const value = rec[field];
  if (absent(value)) return;
  if (typeof value !== 'string') {
    p.add(at(path, field), `must be a string, got ${describe(value)}`);
  } else if (value.length > max) {
    p.add(at(path, field), `must be at most ${max} characters, got ${value.length}`);
  }
}

/** Records a problem when `rec[field]` is present and not a boolean. */
export function checkBoolean(rec: Rec, field: string, path: string, p: Problems): void {
  const value = rec[field];
  if (!absent(value) && typeof value !== 'boolean') {
    p.add(at(path, field), `must be true or false, got ${describe(value)}`);
  }
}

/**
 * Checks a port name: "" (only when it is the one port of its list), else a DNS-1123 label of at most
 * 63 characters, unique in its list (`names` collects them). The API's rule for Services, Endpoints
 * and EndpointSlices alike.
 */
export function checkPortName(
  value: unknown,
  path: string,
  single: boolean,
  names: Set<string>,
  p: Problems,
): void {
  const name = absent(value) ? '' : value;
  if (typeof name !== 'string') {
    p.add(path, `must be a string, got ${describe(name)}`);
  } else if (name === '') {
    if (!single) p.add(path, 'must be non-empty when there is more than one port');
  } else if (name.length > 63 || !DNS1123_LABEL.test(name)) {
    p.add(
      path,
      `must be a DNS-1123 label (lower-case alphanumerics and "-"), got ${describe(name)}`,
    );
  } else if (names.has(name)) {
    p.add(path, `duplicate port name ${describe(name)}; port names must be unique`);
  } else {
    names.add(name);
  }
}

/** Records a problem when an array copied from `path` holds more than `max` entries. */
export function checkCount(
  items: readonly unknown[],
  path: string,
  max: number,
  p: Problems,
): void {
  if (items.length > max) p.add(path, `must have at most ${max} entries, got ${items.length}`);
}

/** Records a problem when `rec[field]` is present and not one of `allowed`. */
export function checkOneOf(
  rec: Rec,
  field: string,
  path: string,
  allowed: ReadonlySet<unknown>,
  p: Problems,
): void {
  const value = rec[field];
  if (!absent(value) && !allowed.has(value)) {
    p.add(at(path, field), `must be one of ${[...allowed].join(', ')}, got ${describe(value)}`);
  }
}

/** Records a problem when `value` is not an integer in `min`..`max`. */
export function checkInteger(
  value: unknown,
  path: string,
  min: number,
  max: number,
  p: Problems,
): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    p.add(path, `must be an integer between ${min} and ${max}, got ${describe(value)}`);
  }
}

/** The API's bounds: a label key (prefix/name) and value, and all annotations of an object. */
const MAX_LABEL_KEY = 317;
const MAX_LABEL_VALUE = 63;
const MAX_ANNOTATIONS_TOTAL = 256 * 1024;

/**
 * Copies a Record<string, string> held in `rec[field]` (labels, annotations), bounded as the API
 * bounds them: labels a key of at most 317 characters and a value of at most 63; annotations at most
 * 256 KiB of keys and values together.
 */
function stringMap(rec: Rec, field: string, path: string, p: Problems, labels: boolean): void {
  const copy = recordField(rec, field, path, p);
  if (!copy) return;
  let total = 0;
  for (const [k, v] of Object.entries(copy)) {
    const where = `${at(path, field)}[${describe(k)}]`;
    if (typeof v !== 'string') {
      p.add(where, `must be a string, got ${describe(v)}`);
      continue;
    }
    total += k.length + v.length;
    if (labels && (k.length > MAX_LABEL_KEY || v.length > MAX_LABEL_VALUE)) {
      p.add(
        where,
        `must have a key of at most ${MAX_LABEL_KEY} and a value of at most ${MAX_LABEL_VALUE} characters`,
      );
    }
  }
  if (!labels && total > MAX_ANNOTATIONS_TOTAL) {
    p.add(at(path, field), `must total at most ${MAX_ANNOTATIONS_TOTAL} characters, got ${total}`);
  }
}

/** Checks and copies `metadata`; returns the copy with the namespace defaulted. */
function checkMetadata(obj: Rec, p: Problems): Rec | undefined {
  const meta = copyRecord(obj.metadata, 'metadata', p);
  if (!meta) return undefined;
  obj.metadata = meta;
  const { name, namespace } = meta;
  if (typeof name !== 'string' || name === '') {
    p.add('metadata.name', `must be a non-empty string, got ${describe(name)}`);
  } else if (name.length > 253 || !DNS1123_SUBDOMAIN.test(name)) {
    p.add(
      'metadata.name',
      `must be a DNS-1123 name (lower-case alphanumerics, "-", "."), got ${describe(name)}`,
    );
  }
  if (absent(namespace) || namespace === '') {
    meta.namespace = DEFAULT_NAMESPACE;
  } else if (
    typeof namespace !== 'string' ||
    namespace.length > 63 ||
    !DNS1123_LABEL.test(namespace)
  ) {
    p.add(
      'metadata.namespace',
      `must be a DNS-1123 label (lower-case alphanumerics and "-"), got ${describe(namespace)}`,
    );
  }
  checkString(meta, 'uid', 'metadata', p);
  checkString(meta, 'resourceVersion', 'metadata', p);
  stringMap(meta, 'labels', 'metadata', p, true);
  stringMap(meta, 'annotations', 'metadata', p, false);
  return meta;
}

/** The key named in an error: "ns/name" when both can be shown, a placeholder otherwise. */
function displayKey(meta: Rec | undefined): string {
  if (!meta) return UNKNOWN_KEY;
  const ns = typeof meta.namespace === 'string' ? meta.namespace : DEFAULT_NAMESPACE;
  const name = meta.name;
  const safe = (s: string) => (/^[-a-z0-9.]{1,253}$/.test(s) ? s : describe(s));
  return typeof name === 'string' && name !== ''
    ? `${safe(ns)}/${safe(name)}`
    : `${safe(ns)}/<unnamed>`;
}

/**
 * The validator of one kind: it runs `check` on a shallow copy of the object whose metadata has been
 * checked (namespace defaulted), turns any throw into a problem (so a validator never throws), and
 * returns that copy, remembered as validated for `kind` so that `{ reuse: true }` can give it back
 * as it is later.
 */
export function validator<T>(
  kind: string,
  check: (copy: Rec, meta: Rec | undefined, p: Problems) => void,
): (obj: unknown, options?: ValidateOptions) => ValidationResult<T> {
  return (obj, options) =>
    options?.reuse && wasValidated(obj, kind)
      ? { ok: true, value: obj as T }
      : runValidator<T>(kind, obj, check);
}

function runValidator<T>(
  kind: string,
  obj: unknown,
  check: (copy: Rec, meta: Rec | undefined, p: Problems) => void,
): ValidationResult<T> {
  const p = new Problems();
  let meta: Rec | undefined;
  let copy: Rec | undefined;
  try {
    copy = copyRecord(obj, kind, p);
    if (copy) {
      meta = checkMetadata(copy, p);
      check(copy, meta, p);
    }
  } catch (err) {
    p.add(kind, `could not be read (${errorName(err)})`);
  }
  if (p.list.length > 0 || !copy) {
    return { ok: false, error: new InvalidObjectError(kind, displayKey(meta), p.reason()) };
  }
  validatedKinds.set(copy, kind);
  return { ok: true, value: copy as unknown as T };
}
