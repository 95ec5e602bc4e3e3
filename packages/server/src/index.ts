/**
 * The public surface of @userspace-proxy/server: the daemon's building blocks, for programs that
 * want the daemon's configuration handling, health and metrics servers or manifest source without
 * its command line. Every export is named on purpose; `main.ts` (the bin) is not exported.
 */

export type { BoundedReadOptions } from './bounded-read.js';
export {
  FileTooLargeError,
  MAX_CONFIG_FILE_BYTES,
  NotRegularFileError,
  readBoundedFile,
} from './bounded-read.js';
export { runCleanup } from './cleanup.js';
export type { CliOptions, CliResult } from './cli.js';
export { buildProgram, parseCommandLine } from './cli.js';
export type { DecodeResult, ResolvedConfiguration, ResolveOptions } from './config-load.js';
export {
  decodeConfiguration,
  loadConfigurationFile,
  overlayFlags,
  resolveConfiguration,
} from './config-load.js';
export type {
  ClientConnectionConfiguration,
  ConfigInput,
  ConntrackConfiguration,
  IPTablesConfiguration,
  KubeProxyConfiguration,
  ListLimitsConfiguration,
  LoggingConfiguration,
  UserspaceProxyConfiguration,
} from './config-schema.js';
export {
  CONFIG_API_VERSION,
  CONFIG_KIND,
  configFileSchema,
  DEFAULT_HEALTHZ_PORT,
  DEFAULT_LIST_LIMITS_CONFIG,
  DEFAULT_METRICS_PORT,
  DEFAULT_PROXY_MODE,
  DEFAULT_USERSPACE_PROXY,
  defaultConfiguration,
  effectiveProxyMode,
  mergeInput,
  PROXY_MODES,
} from './config-schema.js';
export { validateConfiguration, validateHostPort } from './config-validate.js';
export type { ConfigurationWriteOptions } from './config-write.js';
export { configurationYaml, toExternalConfiguration } from './config-write.js';
export { configzBody, toInternalConfiguration } from './configz.js';
export type { DaemonOptions } from './daemon.js';
export type { DaemonServersOptions } from './daemon-servers.js';
export type { ProfilerSession, ProfilingSources, WorkerProfiles } from './debug-profiling.js';
export {
  HEAP_SAMPLING_INTERVAL_BYTES,
  PROFILE_DEFAULT_SECONDS,
  PROFILE_MAX_SECONDS,
  ProcessProfiler,
  ProfilerBusyError,
  serveProfiling,
  sharedProcessProfiler,
} from './debug-profiling.js';
export { Daemon, loggingRecorder } from './daemon.js';
export { DurationParseError, formatDuration, parseDuration } from './duration.js';
export type { FieldErrorType, RenderedValue } from './field-error.js';
export { aggregate, FieldError } from './field-error.js';
export type { WatchFileOptions } from './file-watch.js';
export { watchFile } from './file-watch.js';
export type { HealthResponseObserver, HealthServerOptions } from './health-server.js';
export { createHealthServer, healthHandler } from './health-server.js';
export type { Clock, HealthStatus, ProxierHealthOptions } from './healthz-state.js';
export { goTimeString, healthBody, ProxierHealth, systemClock } from './healthz-state.js';
export type { DescriptorBudget } from './fd-budget.js';
export type { HttpLimits, HttpRefusal } from './http-guard.js';
export type { RetryingListenerOptions } from './http-listen.js';
export { LISTEN_RETRY_MS, RetryingListener } from './http-listen.js';
export {
  LOG_MESSAGE_MAX_CHARS,
  LOG_VALUE_MAX_CHARS,
  logSafe,
  quoteForLog,
} from './log-safe.js';
export type { DaemonLoggerOptions } from './logging.js';
export { createDaemonLogger, verbosityToMinLevel } from './logging.js';
export type { ManifestContents, ManifestParseResult } from './manifest-parse.js';
export {
  MAX_MANIFEST_BYTES,
  MAX_MANIFEST_DEPTH,
  MAX_MANIFEST_ERRORS,
  MAX_MANIFEST_OBJECTS,
  parseManifest,
} from './manifest-parse.js';
export type { ManifestParser } from './manifest-parser.js';
export { inlineManifestParser } from './manifest-parser.js';
export type { WorkerManifestParserOptions } from './manifest-parser-worker.js';
export {
  MANIFEST_PARSE_HEAP_MB,
  MANIFEST_PARSE_TIMEOUT_MS,
  MANIFEST_WORKER_IDLE_MS,
  WorkerManifestParser,
} from './manifest-parser-worker.js';
export type { ProxyMetricsOptions } from './metrics.js';
export { LAST_CHANGE_TRIGGER_TIME, ProxyMetrics } from './metrics.js';
export type { MetricCatalog, ServiceLabel } from './metrics-catalog.js';
export type { MetricsServerOptions, MetricsSource } from './metrics-server.js';
export { createMetricsServer, metricsHandler } from './metrics-server.js';
export type { NodeIPsOptions, WatchNodeIPsOptions } from './node-ips.js';
export { sourceNodeIPs, watchNodeIPs } from './node-ips.js';
export type { ProxierEnvironmentOptions } from './proxier-options.js';
export {
  coreProxyMode,
  needsSourceNodeIPs,
  nodeIPsFor,
  proxierOptionsFor,
} from './proxier-options.js';
export type { CommandIO } from './run.js';
export { processIO, runCommand } from './run.js';
export type { ManifestSourceOptions, ReloadOutcome } from './source-manifest.js';
export type {
  StatusModel,
  StatusPortal,
  StatusServicePort,
  StatusWorker,
} from './status-model.js';
export { createManifestSource, ManifestError, ManifestSource } from './source-manifest.js';
export type { SourceFactoryOptions } from './source-select.js';
export { createSources } from './source-select.js';
export type {
  KubernetesImporter,
  KubernetesSourcesOptions,
  ListPagingLimits,
  ProxySources,
  SourceChoice,
} from './sources.js';
export { chooseSource, KUBERNETES_UNAVAILABLE, loadClusterSources } from './sources.js';
export { VERSION } from './version.js';
export type { SourceObservers } from './wiring.js';
export { observeSources } from './wiring.js';
