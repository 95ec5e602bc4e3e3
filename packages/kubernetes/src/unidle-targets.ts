import { ProxyError } from '@userspace-proxy/core';

/**
 * OpenShift's idling annotations (`openshift/api` unidling/v1alpha1), and a bounded parser of the
 * list of workloads `oc idle` scaled down. The annotation is written by whoever may edit the Service,
 * so it is untrusted input: its size and entry count are capped, and every entry is checked before the
 * unidler turns it into an API call.
 */

/** On the Service: the RFC 3339 time it was idled. The hybrid proxier keys on its presence. */
export const IDLED_AT_ANNOTATION = 'idling.alpha.openshift.io/idled-at';

/** On the Service: a JSON list of `{kind, name, group?, apiVersion?, replicas}`, what to scale back. */
export const UNIDLE_TARGETS_ANNOTATION = 'idling.alpha.openshift.io/unidle-targets';

/** The workload kinds the unidler scales, all through `apps/v1` and their `scale` subresource. */
export type UnidleTargetKind = 'Deployment' | 'StatefulSet' | 'ReplicaSet';

/** The plural resource of each kind: the path segment and the RBAC resource (`<plural>/scale`). */
export const UNIDLE_TARGET_RESOURCES: Readonly<Record<UnidleTargetKind, string>> = {
  Deployment: 'deployments',
  StatefulSet: 'statefulsets',
  ReplicaSet: 'replicasets',
};

/** One workload to scale back up, in the Service's namespace. */
export interface UnidleTarget {
  kind: UnidleTargetKind;
  name: string;
  /** The replica count it had before it was idled (at least 1). */
  replicas: number;
}

/** Limits of {@link parseUnidleTargets}; each has a default. */
export interface UnidleTargetsLimits {
  /** Longer annotation values are refused whole. Default 16 384 characters. */
  maxBytes?: number;
  /** Entries past this many are ignored (and reported). Default 32. */
  maxTargets?: number;
}

/** The defaults of {@link UnidleTargetsLimits}. */
export const DEFAULT_UNIDLE_TARGETS_LIMITS: Required<UnidleTargetsLimits> = {
  maxBytes: 16_384,
  maxTargets: 32,
};

/** What {@link parseUnidleTargets} found. */
export interface ParsedUnidleTargets {
  /** The entries that can be scaled, without duplicates (the first of a kind/name wins). */
  targets: UnidleTarget[];
  /**
   * Every entry of the list as it was written, in order, including those refused: what a rewrite of
   * the annotation keeps when it drops the entries that were handled. Empty when the value is not a list.
   */
  entries: unknown[];
  /** `entries[i]` is `targets[targetIndex[i]]` (a duplicate points at the first), or -1 when refused. */
  targetIndex: number[];
  /** Set when the value, or any entry, was refused. */
  error?: InvalidUnidleTargetsError;
}

/** The annotation, or some of its entries, could not be used; the message says why. */
export class InvalidUnidleTargetsError extends ProxyError {
  /** The individual problems, at most a few. */
  readonly problems: readonly string[];

  constructor(service: string, problems: readonly string[]) {
    super(
      'ERR_INVALID_UNIDLE_TARGETS',
      `Service ${service}: ignoring (part of) annotation ${UNIDLE_TARGETS_ANNOTATION}: ${problems.join('; ')}`,
    );
    this.problems = problems;
  }
}

const MAX_PROBLEMS = 5;
const MAX_QUOTED = 64;
const MAX_REPLICAS = 2_147_483_647; // int32, the type of spec.replicas
const DNS1123_SUBDOMAIN = /^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$/;
const KINDS: ReadonlySet<string> = new Set(Object.keys(UNIDLE_TARGET_RESOURCES));
// `oc idle` records the group of the object it scaled; old clusters wrote extensions/v1beta1 ones.
const GROUPS: ReadonlySet<string> = new Set(['', 'apps', 'extensions']);

/** A short, quoted, escaped form of any value, safe to put in a log line. */
export function quoteForLog(value: unknown): string {
  let text: string;
  try {
    text = typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value));
  } catch {
    text = 'an unreadable value';
  }
  return JSON.stringify(text.length > MAX_QUOTED ? `${text.slice(0, MAX_QUOTED)}…` : text);
}

function groupOf(entry: Record<string, unknown>): unknown {
  if (entry.group !== undefined && entry.group !== null) return entry.group;
  const apiVersion = entry.apiVersion;
  if (apiVersion === undefined || apiVersion === null || apiVersion === '') return '';
  if (typeof apiVersion !== 'string') return apiVersion;
  const slash = apiVersion.indexOf('/');
  return slash < 0 ? '' : apiVersion.slice(0, slash);
}

/** Checks one entry; returns the target or the reason it was refused. */
function checkEntry(entry: unknown): UnidleTarget | string {
  if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) {
    return `not an object: ${quoteForLog(entry)}`;
  }
  const e = entry as Record<string, unknown>;
  const { kind, name, replicas } = e;
  if (typeof kind !== 'string' || !KINDS.has(kind)) {
    return `kind ${quoteForLog(kind)} is not one of ${[...KINDS].join(', ')}`;
  }
  const group = groupOf(e);
  if (typeof group !== 'string' || !GROUPS.has(group)) {
    return `${kind} of group ${quoteForLog(group)}: only apps is scaled`;
  }
  if (typeof name !== 'string' || name.length > 253 || !DNS1123_SUBDOMAIN.test(name)) {
    return `${kind} name ${quoteForLog(name)} is not a DNS-1123 subdomain`;
  }
  if (typeof replicas !== 'number' || !Number.isInteger(replicas) || replicas > MAX_REPLICAS) {
    return `${kind} ${name}: replicas ${quoteForLog(replicas)} is not an int32`;
  }
  if (replicas < 1) return `${kind} ${name}: replicas ${replicas} would leave it idle`;
  return { kind: kind as UnidleTargetKind, name, replicas };
}

/**
 * Parses an `unidle-targets` value. Never throws: a value too long, not JSON or not a list yields no
 * targets; a refused entry is skipped; either way `error` says what was wrong. A missing annotation
 * (`undefined`) is an empty list, as in OpenShift's controller.
 */
export function parseUnidleTargets(
  raw: string | undefined,
  service: string,
  limits: UnidleTargetsLimits = {},
): ParsedUnidleTargets {
  const maxBytes = limits.maxBytes ?? DEFAULT_UNIDLE_TARGETS_LIMITS.maxBytes;
  const maxTargets = limits.maxTargets ?? DEFAULT_UNIDLE_TARGETS_LIMITS.maxTargets;
  const none = (problem: string): ParsedUnidleTargets => ({
    targets: [],
    entries: [],
    targetIndex: [],
    error: new InvalidUnidleTargetsError(service, [problem]),
  });
  if (raw === undefined) return { targets: [], entries: [], targetIndex: [] };
  if (typeof raw !== 'string') return none(`not a string: ${quoteForLog(raw)}`);
  if (raw.length > maxBytes) {
    return none(`${raw.length} characters, more than the limit of ${maxBytes}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (err) {
    return none(`not JSON (${(err as Error).message.slice(0, MAX_QUOTED)}): ${quoteForLog(raw)}`);
  }
  if (!Array.isArray(value)) return none(`not a JSON list: ${quoteForLog(raw)}`);
  const problems: string[] = [];
  const targets: UnidleTarget[] = [];
  const targetIndex: number[] = [];
  const seen = new Map<string, number>();
  value.forEach((entry, i) => {
    targetIndex.push(-1);
    if (i >= maxTargets) {
      if (i === maxTargets) {
        problems.push(`${value.length} entries, more than the limit of ${maxTargets}`);
      }
      return;
    }
    const checked = checkEntry(entry);
    if (typeof checked === 'string') {
      problems.push(`entry ${i}: ${checked}`);
      return;
    }
    const key = `${checked.kind}/${checked.name}`;
    const first = seen.get(key);
    if (first !== undefined) {
      targetIndex[i] = first; // a duplicate: the first one is scaled, for both
      return;
    }
    seen.set(key, targets.length);
    targetIndex[i] = targets.length;
    targets.push(checked);
  });
  const result: ParsedUnidleTargets = { targets, entries: value, targetIndex };
  if (problems.length > 0) {
    const shown = problems.slice(0, MAX_PROBLEMS);
    if (problems.length > MAX_PROBLEMS) {
      shown.push(`and ${problems.length - MAX_PROBLEMS} more problem(s)`);
    }
    result.error = new InvalidUnidleTargetsError(service, shown);
  }
  return result;
}
