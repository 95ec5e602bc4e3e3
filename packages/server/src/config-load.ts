import { dirname, isAbsolute, join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { z } from 'zod';
import { MAX_CONFIG_FILE_BYTES, readBoundedFile } from './bounded-read.js';
import {
  CONFIG_API_VERSION,
  CONFIG_KIND,
  type ConfigInput,
  configFileSchema,
  defaultConfiguration,
  type KubeProxyConfiguration,
  mergeInput,
} from './config-schema.js';
import { validateConfiguration } from './config-validate.js';
import { collectionKeyWarnings, YAML_PARSE_OPTIONS } from './manifest-parse.js';

/**
 * Reading a KubeProxyConfiguration file and combining it with flags, with kube-proxy's precedence:
 * a config file replaces every flag that maps to a field, except `--hostname-override` and
 * explicitly set logging flags. Decoding is lenient like kube-proxy's fallback decoder: unknown fields
 * are warnings, so a file written for a newer kube-proxy still loads. Nothing here throws for bad
 * input: every problem comes back as a message, all of them at once.
 */

/** The outcome of decoding a file: the fields it sets, plus what was wrong with it. */
export interface DecodeResult {
  /** Undefined only when the file could not be read as a KubeProxyConfiguration at all. */
  input: ConfigInput | undefined;
  warnings: string[];
  errors: string[];
}

/** What to combine: the file (if any) and the flags the command line gave. */
export interface ResolveOptions {
  /** `--config`: the path of the file; "" or absent for flags only. */
  configFile?: string;
  /** The fields the flags set, already parsed (durations in ms, addresses with ports). */
  flags: ConfigInput;
  /** Long names of the flags given on the command line, for precedence and warnings. */
  explicit: ReadonlySet<string>;
  /** Long names of the flags that set a field the file may also set (warned about when ignored). */
  configFlags: ReadonlySet<string>;
  /**
   * Reads the file; injectable for tests. Default {@link readConfigurationFile}: a regular file of
   * at most {@link MAX_CONFIG_FILE_BYTES}, as UTF-8.
   */
  read?: (path: string) => Promise<string>;
}

/** The effective configuration and what is wrong with it: usable only when `errors` is empty. */
export interface ResolvedConfiguration {
  /** Undefined only when the file could not be decoded at all. */
  config: KubeProxyConfiguration | undefined;
  warnings: string[];
  errors: string[];
}

type Issue = z.core.$ZodIssue;

function describePath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) {
    out += typeof part === 'number' ? `[${part}]` : `${out === '' ? '' : '.'}${String(part)}`;
  }
  return out;
}

/** Deletes `obj[path]`, or the last named field on the path when it ends in list indexes. */
function deleteAt(obj: unknown, path: readonly PropertyKey[]): void {
  const keys = [...path];
  while (keys.length > 0 && typeof keys[keys.length - 1] === 'number') keys.pop();
  const last = keys.pop();
  let node = obj;
  for (const key of keys) {
    if (typeof node !== 'object' || node === null) return;
    node = (node as Record<PropertyKey, unknown>)[key];
  }
  if (typeof node === 'object' && node !== null && last !== undefined) {
    delete (node as Record<PropertyKey, unknown>)[last];
  }
}

/** Decodes one YAML or JSON KubeProxyConfiguration document. */
export function decodeConfiguration(text: string): DecodeResult {
  const warnings: string[] = [];
  const docs = parseAllDocuments(text, YAML_PARSE_OPTIONS);
  const list = Array.isArray(docs) ? docs : [docs];
  const syntax = list.flatMap((doc) =>
    doc.errors.map((e) => e.message.split('\n')[0] ?? e.message),
  );
  if (syntax.length > 0) {
    return { input: undefined, warnings, errors: syntax.map((m) => `failed to decode: ${m}`) };
  }
  if (list.length !== 1) {
    const detail = `the file holds ${list.length} YAML documents; exactly one KubeProxyConfiguration is expected`;
    return { input: undefined, warnings, errors: [`failed to decode: ${detail}`] };
  }
  const doc = list[0];
  if (doc !== undefined) warnings.push(...collectionKeyWarnings(doc, text, 'the configuration'));
  const raw: unknown = doc?.toJS();
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    const got = raw === null ? 'null' : Array.isArray(raw) ? 'a list' : typeof raw;
    return {
      input: undefined,
      warnings,
      errors: [`failed to decode: expected a ${CONFIG_KIND} object, got ${got}`],
    };
  }
  const { apiVersion, kind } = raw as { apiVersion?: unknown; kind?: unknown };
  if (apiVersion !== CONFIG_API_VERSION || kind !== CONFIG_KIND) {
    const message =
      apiVersion === undefined || kind === undefined
        ? `failed to decode: apiVersion and kind must be set to "${CONFIG_API_VERSION}" and "${CONFIG_KIND}"`
        : `got unexpected config type: ${String(apiVersion)}, Kind=${String(kind)}`;
    return { input: undefined, warnings, errors: [message] };
  }

  const errors: string[] = [];
  // Strict first; unknown keys become warnings and are dropped, fields with a wrong type become
  // errors and are dropped too, so the rest of the file is still validated in the same run.
  for (let attempt = 0; attempt < 50; attempt++) {
    const result = configFileSchema.safeParse(raw);
    if (result.success) return { input: result.data, warnings, errors };
    for (const issue of result.error.issues as Issue[]) {
      if (issue.code === 'unrecognized_keys') {
        for (const key of issue.keys) {
          warnings.push(`unknown field "${describePath([...issue.path, key])}" is ignored`);
          deleteAt(raw, [...issue.path, key]);
        }
      } else {
        errors.push(`failed to decode: ${describePath(issue.path)}: ${issue.message}`);
        deleteAt(raw, issue.path);
      }
    }
  }
  return { input: undefined, warnings, errors };
}

/**
 * Reads a configuration file as UTF-8, refusing (before reading anything) one that is not a regular
 * file or is over {@link MAX_CONFIG_FILE_BYTES}: `--config /dev/zero` or a FIFO must fail with a
 * message, not exhaust the heap or hang the start.
 */
export function readConfigurationFile(path: string): Promise<string> {
  return readBoundedFile(path, { maxBytes: MAX_CONFIG_FILE_BYTES });
}

/** Reads and decodes a configuration file; a read failure is an error, not an exception. */
export async function loadConfigurationFile(
  path: string,
  read: (path: string) => Promise<string> = readConfigurationFile,
): Promise<DecodeResult> {
  let text: string;
  try {
    text = await read(path);
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    return {
      input: undefined,
      warnings: [],
      errors: [`failed to read config file ${path}: ${reason}`],
    };
  }
  return decodeConfiguration(text);
}

/** `config` with the flag values laid over it (no re-defaulting: `--min-sync-period 0` means 0). */
export function overlayFlags(
  config: KubeProxyConfiguration,
  flags: ConfigInput,
): KubeProxyConfiguration {
  return mergeInput(config as unknown as ConfigInput, flags) as unknown as KubeProxyConfiguration;
}

/**
 * Flags that win over the file (kube-proxy ≥ 1.30 for logging; every version for the hostname; ours
 * for `--workers`, the shape of the process on this machine rather than of the proxy).
 */
const ALWAYS_APPLIED = new Set(['hostname-override', 'v', 'logging-format', 'workers']);

/**
 * The effective configuration from flags and an optional file, validated. Warnings cover unknown
 * fields, unused feature gates and flags that the file overrides.
 */
export async function resolveConfiguration(
  options: ResolveOptions,
): Promise<ResolvedConfiguration> {
  const warnings: string[] = [];
  const errors: string[] = [];
  let config: KubeProxyConfiguration;
  if (options.configFile) {
    const decoded = await loadConfigurationFile(options.configFile, options.read);
    warnings.push(...decoded.warnings);
    errors.push(...decoded.errors);
    if (decoded.input === undefined) return { config: undefined, warnings, errors };
    config = defaultConfiguration(decoded.input);
    // Our own path field is read relative to the file that names it, so a config and its manifest
    // can live side by side and be started from anywhere.
    const servicesFile = config.userspaceProxy.servicesFile;
    if (servicesFile !== '' && !isAbsolute(servicesFile)) {
      config.userspaceProxy.servicesFile = join(dirname(options.configFile), servicesFile);
    }
    const kept: ConfigInput = {};
    if (options.flags.hostnameOverride !== undefined)
      kept.hostnameOverride = options.flags.hostnameOverride;
    const logging: NonNullable<ConfigInput['logging']> = {};
    if (options.explicit.has('v') && options.flags.logging?.verbosity !== undefined) {
      logging.verbosity = options.flags.logging.verbosity;
    }
    if (options.explicit.has('logging-format') && options.flags.logging?.format !== undefined) {
      logging.format = options.flags.logging.format;
    }
    if (Object.keys(logging).length > 0) kept.logging = logging;
    const workers = options.flags.userspaceProxy?.workers;
    if (options.explicit.has('workers') && workers !== undefined) kept.userspaceProxy = { workers };
    config = overlayFlags(config, kept);
    for (const flag of options.explicit) {
      if (options.configFlags.has(flag) && !ALWAYS_APPLIED.has(flag)) {
        warnings.push(
          `flag --${flag} is ignored because --config is set; set it in the file instead`,
        );
      }
    }
  } else {
    config = overlayFlags(defaultConfiguration(), options.flags);
  }
  if (options.flags.hostnameOverride !== undefined) {
    const hostname = options.flags.hostnameOverride.trim().toLowerCase();
    if (hostname === '') errors.push('empty hostname-override is invalid');
    config.hostnameOverride = hostname;
  }
  for (const gate of Object.keys(config.featureGates)) {
    warnings.push(`feature gate "${gate}" has no effect on userspace-proxy and is ignored`);
  }
  errors.push(...validateConfiguration(config).map(String));
  return { config, warnings, errors };
}
