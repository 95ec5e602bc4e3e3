import {
  type EndpointSlice,
  type Endpoints,
  objectKey,
  type Service,
  validateEndpointSlice,
  validateEndpoints,
  validateService,
} from '@userspace-proxy/core';
import { type Document, isCollection, parseAllDocuments, visit } from 'yaml';
import { LOG_MESSAGE_MAX_CHARS, logSafe, quoteForLog } from './log-safe.js';
import { findExcessiveNesting } from './manifest-depth.js';

/**
 * Parsing a manifest file: YAML or JSON, one or more documents (`---`), each a Service, an
 * EndpointSlice, an Endpoints or a List of them, as `kubectl get -o yaml` writes them. A manifest is
 * accepted whole or not at all, so a half-edited file never reaches the proxy: every problem is
 * collected and reported together. Objects of other kinds are skipped with a warning, so a manifest
 * shared with other tools still loads.
 */

/** What a valid manifest holds, normalised by core's validators (namespace "default" when absent). */
export interface ManifestContents {
  services: Service[];
  endpointSlices: EndpointSlice[];
  endpoints: Endpoints[];
}

/** The outcome of {@link parseManifest}. */
export type ManifestParseResult =
  | { ok: true; contents: ManifestContents; warnings: string[] }
  | { ok: false; errors: string[]; warnings: string[] };

/** At most this many errors are reported for one file, so a garbage file cannot flood the log. */
export const MAX_MANIFEST_ERRORS = 20;
/** The most objects one manifest may hold; a bound on memory for a runaway generator. */
export const MAX_MANIFEST_OBJECTS = 10_000;
/** The largest manifest file read (16 MiB), for the same reason. */
export const MAX_MANIFEST_BYTES = 16 * 1024 * 1024;
/**
 * The deepest nesting parsed (levels of maps, lists and compact entries). A Kubernetes object needs
 * about ten, a List of them twelve; the YAML parser's time and memory grow steeply with depth, so a
 * deeper file is refused before it is parsed (see manifest-depth.ts).
 */
export const MAX_MANIFEST_DEPTH = 64;

/** The message of a manifest over {@link MAX_MANIFEST_BYTES}. */
export function tooLargeMessage(size: number): string {
  const mib = MAX_MANIFEST_BYTES / (1024 * 1024);
  return `the manifest is ${size} bytes, larger than the limit of ${mib} MiB (${MAX_MANIFEST_BYTES} bytes); the file was not parsed`;
}

/** A YAML parser error, as one bounded and escaped line. */
function yamlError(message: string): string {
  return logSafe(message.split('\n')[0] ?? message, LOG_MESSAGE_MAX_CHARS);
}

/**
 * Options of every YAML parse of ours. The library's own warnings are off: it sends them through
 * `process.emitWarning`, so they reach stderr as plain text outside our logger (even with
 * `--logging-format json`), once per parse, uncounted and uncapped. The one it gives for files we
 * read, a key that is a map or a list, is reported by {@link collectionKeyWarnings} instead.
 */
export const YAML_PARSE_OPTIONS = { logLevel: 'error' } as const;

/** At most this many collection keys are named per document; the rest are counted. */
const MAX_COLLECTION_KEY_WARNINGS = 5;

/**
 * Our own warnings for the keys of `doc` that are a map or a list (`? [a, b]: 1`, `{a: 1}: 2`):
 * JavaScript objects have string keys, so such a key is turned into its YAML text. No field of
 * ours has such a key, so the entry is either ignored or rejected later; this says why.
 */
export function collectionKeyWarnings(doc: Document, text: string, where: string): string[] {
  const lines: number[] = [];
  visit(doc, {
    Pair(_, pair) {
      if (isCollection(pair.key)) {
        const offset = pair.key.range?.[0] ?? 0;
        let line = 1;
        for (let i = text.indexOf('\n'); i !== -1 && i < offset; i = text.indexOf('\n', i + 1))
          line++;
        lines.push(line);
      }
    },
  });
  if (lines.length === 0) return [];
  const shown = lines.slice(0, MAX_COLLECTION_KEY_WARNINGS).join(', ');
  const more =
    lines.length > MAX_COLLECTION_KEY_WARNINGS
      ? ` and ${lines.length - MAX_COLLECTION_KEY_WARNINGS} more`
      : '';
  return [
    `${where}: a key that is a map or a list (line ${shown}${more}) is used as its YAML text (JavaScript object keys are strings)`,
  ];
}

const API_VERSIONS: Readonly<Record<string, string>> = {
  Service: 'v1',
  Endpoints: 'v1',
  EndpointSlice: 'discovery.k8s.io/v1',
};

/** Parses and validates a manifest's text. Never throws. */
export function parseManifest(text: string): ManifestParseResult {
  const errors: string[] = [];
  const warnings: string[] = [];
  const contents: ManifestContents = { services: [], endpointSlices: [], endpoints: [] };
  const seen = new Map<string, string>();
  if (text.length > MAX_MANIFEST_BYTES) {
    return { ok: false, errors: [tooLargeMessage(text.length)], warnings };
  }
  const deep = findExcessiveNesting(text, MAX_MANIFEST_DEPTH);
  if (deep !== undefined) {
    const error = `line ${deep.line}: nested deeper than the limit of ${MAX_MANIFEST_DEPTH} levels (a Kubernetes object needs about 10); the file was not parsed`;
    return { ok: false, errors: [error], warnings };
  }
  let docs: ReturnType<typeof parseAllDocuments>;
  try {
    docs = parseAllDocuments(text, YAML_PARSE_OPTIONS);
  } catch (err) {
    return {
      ok: false,
      errors: [`not YAML or JSON: ${yamlError((err as Error).message)}`],
      warnings,
    };
  }
  const list = Array.isArray(docs) ? docs : [docs];
  const items: { where: string; obj?: unknown; error?: string }[] = [];
  list.forEach((doc, i) => {
    const where = `document ${i + 1}`;
    for (const e of doc.errors) items.push({ where, error: yamlError(e.message) });
    if (doc.errors.length > 0) return;
    warnings.push(...collectionKeyWarnings(doc, text, where));
    let value: unknown;
    try {
      value = doc.toJS({ maxAliasCount: 100 });
    } catch (err) {
      items.push({ where, error: yamlError((err as Error).message) });
      return;
    }
    if (value === null || value === undefined) return;
    const isList =
      typeof value === 'object' &&
      !Array.isArray(value) &&
      (value as { kind?: unknown }).kind === 'List';
    const entries = Array.isArray(value)
      ? value
      : isList
        ? (value as { items?: unknown }).items
        : undefined;
    if (entries === undefined) items.push({ where, obj: value });
    else if (!Array.isArray(entries))
      items.push({ where, error: 'a List must have an "items" list' });
    else
      entries.forEach((obj, j) => {
        items.push({ where: `${where}, item ${j + 1}`, obj });
      });
  });
  if (items.length > MAX_MANIFEST_OBJECTS) {
    errors.push(
      `the manifest holds ${items.length} objects; at most ${MAX_MANIFEST_OBJECTS} are allowed`,
    );
  }
  for (const { where, obj, error } of items.slice(0, MAX_MANIFEST_OBJECTS)) {
    if (error !== undefined) {
      errors.push(`${where}: ${error}`);
      continue;
    }
    if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) {
      errors.push(
        `${where}: expected an object with a "kind", got ${Array.isArray(obj) ? 'a list' : typeof obj}`,
      );
      continue;
    }
    const { kind, apiVersion } = obj as { kind?: unknown; apiVersion?: unknown };
    const expected = typeof kind === 'string' ? API_VERSIONS[kind] : undefined;
    if (expected === undefined) {
      if (kind === undefined) errors.push(`${where}: "kind" is missing`);
      else
        warnings.push(
          `${where}: kind ${quoteForLog(kind)} is not used by the proxy and is ignored`,
        );
      continue;
    }
    if (apiVersion !== undefined && apiVersion !== expected) {
      errors.push(
        `${where}: apiVersion ${quoteForLog(apiVersion)} is not supported for ${kind}; use "${expected}"`,
      );
      continue;
    }
    const result =
      kind === 'Service'
        ? validateService(obj)
        : kind === 'Endpoints'
          ? validateEndpoints(obj)
          : validateEndpointSlice(obj);
    if (!result.ok) {
      const reason = logSafe(result.error.reason, LOG_MESSAGE_MAX_CHARS);
      errors.push(`${where} (${kind} ${logSafe(result.error.key)}): ${reason}`);
      continue;
    }
    const key = `${kind} ${objectKey(result.value)}`;
    const first = seen.get(key);
    if (first !== undefined) {
      errors.push(`${where}: ${logSafe(key)} is also defined in ${first}`);
      continue;
    }
    seen.set(key, where);
    if (kind === 'Service') contents.services.push(result.value as Service);
    else if (kind === 'Endpoints') contents.endpoints.push(result.value as Endpoints);
    else contents.endpointSlices.push(result.value as EndpointSlice);
  }
  for (const key of servicesWithBothSources(contents)) {
    errors.push(
      `Service ${logSafe(key)} is given both an Endpoints object and EndpointSlices; give it one or the other`,
    );
  }
  if (errors.length > MAX_MANIFEST_ERRORS) {
    const more = errors.length - MAX_MANIFEST_ERRORS;
    errors.splice(MAX_MANIFEST_ERRORS, more, `… and ${more} more`);
  }
  return errors.length > 0 ? { ok: false, errors, warnings } : { ok: true, contents, warnings };
}

/**
 * The Services ("ns/name") a manifest gives both an Endpoints object and EndpointSlices. The Proxier
 * would serve the slices and keep the Endpoints object aside, which is never what the author meant,
 * so the manifest is refused instead (docs/operations.md).
 */
function servicesWithBothSources(contents: ManifestContents): string[] {
  const fromEndpoints = new Set(
    contents.endpoints.map((e) => `${e.metadata.namespace || 'default'}/${e.metadata.name}`),
  );
  const both = new Set<string>();
  for (const slice of contents.endpointSlices) {
    const service = slice.metadata.labels?.['kubernetes.io/service-name'];
    const key = `${slice.metadata.namespace || 'default'}/${service ?? ''}`;
    if (service !== undefined && fromEndpoints.has(key)) both.add(key);
  }
  return [...both].sort();
}
