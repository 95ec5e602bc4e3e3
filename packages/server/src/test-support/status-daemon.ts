import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { noopLogger } from '@userspace-proxy/core';
import { defaultConfiguration } from '../config-schema.js';
import { Daemon } from '../daemon.js';
import { type Backends, startBackends } from './backends.js';
import { serviceWithSlice } from './manifests.js';

/**
 * A real daemon on loopback serving a manifest, for the status page tests: `ips` are the
 * Services' "cluster IPs", the endpoint and the metrics server, all on 127.0.0.0/8.
 */
export interface StatusDaemon {
  daemon: Daemon;
  backends: Backends;
  /** "host:port" of the metrics server. */
  metrics: string;
  /** Rewrites the manifest with these Services (see {@link statusService}). */
  write(services: string[]): Promise<void>;
  close(): Promise<void>;
}

/** One Service and its EndpointSlice on `clusterIP`:8080, with an optional description annotation. */
export function statusService(
  backends: Backends,
  spec: { name: string; clusterIP: string; endpoint: string; description?: string },
): string {
  const yaml = serviceWithSlice({
    name: spec.name,
    clusterIP: spec.clusterIP,
    port: 8080,
    portName: 'tcp',
    endpoints: [{ ip: spec.endpoint, port: backends.port }],
  });
  if (spec.description === undefined) return yaml;
  return yaml.replace(
    `metadata: { name: ${spec.name}, namespace: default }`,
    `metadata:\n  name: ${spec.name}\n  namespace: default\n  annotations: { kubernetes.io/description: ${JSON.stringify(spec.description)} }`,
  );
}

/** Starts backends on `endpoint` and a daemon whose metrics server listens on `serversIP`. */
export async function startStatusDaemon(opts: {
  endpoint: string;
  serversIP: string;
  services: (backends: Backends) => string[];
}): Promise<StatusDaemon> {
  const dir = await mkdtemp(join(tmpdir(), 'up-status-'));
  const manifest = join(dir, 'services.yaml');
  const backends = await startBackends({ A: opts.endpoint });
  const write = (services: string[]) => writeFile(manifest, services.join('---\n'));
  await write(opts.services(backends));
  const c = defaultConfiguration();
  c.userspaceProxy.servicesFile = manifest;
  c.healthzBindAddress = `${opts.serversIP}:10256`;
  c.metricsBindAddress = `${opts.serversIP}:10249`;
  c.iptables.minSyncPeriod = 0;
  const daemon = new Daemon({ config: c, logger: noopLogger, env: {}, listenRetryMs: 50 });
  await daemon.start();
  return {
    daemon,
    backends,
    metrics: `${opts.serversIP}:10249`,
    write,
    close: async () => {
      void daemon.stop('test over', { drain: false });
      await daemon.exited;
      await backends.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
