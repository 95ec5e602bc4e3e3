import net from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { type InformerEventHandler, type Logger, noopLogger } from '@userspace-proxy/core';
import type { StoredObject } from './fake-store.js';

/** A KubeConfig pointing at a fake API server (plain HTTP needs skipTLSVerify in client-node 1.4). */
export function kubeConfigFor(
  url: string,
  opts: { token?: string; caData?: string } = {},
): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [
      {
        name: 'fake',
        server: url,
        skipTLSVerify: url.startsWith('http:'),
        ...(opts.caData ? { caData: opts.caData } : {}),
      },
    ],
    users: [{ name: 'test', ...(opts.token ? { token: opts.token } : {}) }],
    contexts: [{ name: 'fake', cluster: 'fake', user: 'test' }],
    currentContext: 'fake',
  });
  return kc;
}

/** Polls `check` until it returns true, or throws after `timeoutMs` (load-independent waits). */
export async function until(
  check: () => boolean,
  what = 'condition',
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** One recorded handler call. */
export type Call = ['add' | 'delete', string] | ['update', string, string];

/** A handler that records calls as [verb, key(, oldRv → newRv)] and keeps the objects. */
export function recordingHandler<
  T extends { metadata: { name: string; namespace?: string; resourceVersion?: string } },
>() {
  const calls: Call[] = [];
  const objects = new Map<string, T>();
  const key = (o: T) =>
    o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;
  const handler: InformerEventHandler<T> = {
    onAdd(obj) {
      calls.push(['add', key(obj)]);
      objects.set(key(obj), obj);
    },
    onUpdate(old, obj) {
      calls.push([
        'update',
        key(obj),
        `${old.metadata.resourceVersion}->${obj.metadata.resourceVersion}`,
      ]);
      objects.set(key(obj), obj);
    },
    onDelete(obj) {
      const o = 'obj' in obj && 'key' in obj ? (obj.obj as T) : (obj as T);
      calls.push(['delete', key(o)]);
      objects.delete(key(o));
    },
  };
  return { calls, objects, handler };
}

/** A ClusterIP Service object. */
export function service(
  namespace: string,
  name: string,
  clusterIP: string,
  port = 80,
  labels?: Record<string, string>,
): StoredObject {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace, ...(labels ? { labels } : {}) },
    spec: {
      type: 'ClusterIP',
      clusterIP,
      clusterIPs: [clusterIP],
      ports: [{ name: 'http', protocol: 'TCP', port, targetPort: port }],
    },
  };
}

/** An EndpointSlice of `service` with ready endpoints at `ips`. */
export function endpointSlice(
  namespace: string,
  service: string,
  ips: string[],
  port = 8080,
  suffix = 'a',
  labels: Record<string, string> = {},
): StoredObject {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `${service}-${suffix}`,
      namespace,
      labels: { 'kubernetes.io/service-name': service, ...labels },
    },
    addressType: 'IPv4',
    endpoints: ips.map((ip) => ({
      addresses: [ip],
      conditions: { ready: true, serving: true, terminating: false },
    })),
    ports: [{ name: 'http', protocol: 'TCP', port }],
  };
}

/** A Node with the given addresses. */
export function node(
  name: string,
  internal: string[],
  extra: Partial<StoredObject> = {},
): StoredObject {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name },
    spec: {},
    status: {
      addresses: [
        { type: 'Hostname', address: name },
        ...internal.map((address) => ({ type: 'InternalIP', address })),
      ],
    },
    ...extra,
  };
}

/** What {@link refuseApiRequests} saw: the clients that tried to reach a gone API server. */
export interface RefusedRequests {
  /** How many requests (connections) for `resource` ("services", "endpointslices", …) were refused. */
  attempts(resource: string): number;
  /** Frees the port, e.g. for the API server to come back on it. */
  close(): Promise<void>;
}

/**
 * Takes over the port an API server has just left and resets every connection after reading its
 * request line, counting requests per resource. A test that says "while the API server is gone, X
 * stays" waits until the clients have tried and failed (a count), instead of sleeping for a guessed
 * time in which a failure may or may not have happened.
 */
export async function refuseApiRequests(port: number): Promise<RefusedRequests> {
  const seen = new Map<string, number>();
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.once('data', (chunk) => {
      const target = chunk.toString('latin1').split(' ', 2)[1] ?? '';
      const path = target.split('?', 1)[0] ?? '';
      const resource = path.split('/').at(-1) ?? '';
      seen.set(resource, (seen.get(resource) ?? 0) + 1);
      socket.resetAndDestroy();
    });
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    attempts: (resource) => seen.get(resource) ?? 0,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A logger that keeps its debug, info and warn lines, for tests that check what was logged. */
export function recordingLogger() {
  const lines: Record<'debug' | 'info' | 'warn', string[]> = { debug: [], info: [], warn: [] };
  const logger: Logger = {
    ...noopLogger,
    debug: (m: unknown) => lines.debug.push(String(m)),
    info: (m: unknown) => lines.info.push(String(m)),
    warn: (m: unknown) => lines.warn.push(String(m)),
    getSubLogger: () => logger,
  };
  return { logger, lines };
}

/** True when `text` holds a C0 control character (ESC, BEL, CR, LF…): what must never reach a log raw. */
export function hasControlChars(text: string | undefined): boolean {
  return [...(text ?? '')].some((c) => c.charCodeAt(0) < 0x20);
}
