// Longer than 450 lines because it is one HTTP server speaking the API server's list/watch, scale and
// patch protocol over one store: its routes, faults and the hostile-response hook share the request
// parsing and the store; split, each part would need the others' private state.
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import {
  jsonPatch,
  mergePatch,
  PatchConflictError,
  parseRequest,
  type RecordedRequest,
} from './api-request.js';
import { FakeStore, type StoredObject, type WatchEvent } from './fake-store.js';
import { fieldMatcher, labelMatcher, type Matcher } from './selector-match.js';

export type { RecordedRequest } from './api-request.js';

/**
 * An in-process HTTP(S) server that speaks the Kubernetes API's list/watch protocol faithfully enough
 * to drive the real `@kubernetes/client-node`: resource versions, paged lists with continue tokens,
 * chunked watch streams with selector transitions (an object leaving a selector is a DELETED),
 * bookmarks, 410 Gone for a compacted history (as an ERROR event or an HTTP status), injected errors,
 * clean and abrupt watch drops, Events (create, JSON/merge patch), Service patches, and the `scale`
 * subresource of apps/v1 Deployments, StatefulSets and ReplicaSets (GET, PUT with a resource-version
 * precondition, JSON/merge PATCH). Every request is recorded, so a test can check what the client did,
 * and that RBAC allows it. It is longer than 400 lines because every route shares the one store,
 * resource-version clock and request log that make the protocol faithful.
 */

export interface FakeApiServerOptions {
  /** Serve HTTPS with this key and certificate. */
  tls?: { key: string | Buffer; cert: string | Buffer };
  /** Require `Authorization: Bearer <token>`; 401 otherwise. */
  token?: string;
  /** Answer a watch from a compacted version with HTTP 410 instead of an ERROR event. */
  goneAsHttpStatus?: boolean;
}

interface Fault {
  verb?: RecordedRequest['verb'];
  resource?: string;
  status: number;
  remaining: number;
}

interface Watcher {
  resource: string;
  namespace: string | undefined;
  matches: Matcher;
  bookmarks: boolean;
  res: http.ServerResponse;
}

const KINDS: Record<string, { kind: string; apiVersion: string }> = {
  services: { kind: 'Service', apiVersion: 'v1' },
  endpoints: { kind: 'Endpoints', apiVersion: 'v1' },
  nodes: { kind: 'Node', apiVersion: 'v1' },
  events: { kind: 'Event', apiVersion: 'v1' },
  endpointslices: { kind: 'EndpointSlice', apiVersion: 'discovery.k8s.io/v1' },
  deployments: { kind: 'Deployment', apiVersion: 'apps/v1' },
  statefulsets: { kind: 'StatefulSet', apiVersion: 'apps/v1' },
  replicasets: { kind: 'ReplicaSet', apiVersion: 'apps/v1' },
};

/** The workloads whose `scale` subresource is served. */
const SCALABLE: ReadonlySet<string> = new Set(['deployments', 'statefulsets', 'replicasets']);

/** The autoscaling/v1 Scale of a workload; `spec.replicas` is omitted at 0, as the real server does. */
function scaleOf(obj: StoredObject): StoredObject {
  const spec = (obj.spec ?? {}) as { replicas?: number; selector?: { matchLabels?: object } };
  const status = (obj.status ?? {}) as { replicas?: number };
  const replicas = spec.replicas ?? 1; // the workloads' default
  const { name, namespace, uid, resourceVersion, creationTimestamp } = obj.metadata;
  const metadata = JSON.parse(
    JSON.stringify({ name, namespace, uid, resourceVersion, creationTimestamp }),
  ) as StoredObject['metadata'];
  return {
    kind: 'Scale',
    apiVersion: 'autoscaling/v1',
    metadata,
    spec: replicas === 0 ? {} : { replicas },
    status: { replicas: status.replicas ?? 0 },
  };
}

export class FakeApiServer {
  readonly store: FakeStore;
  readonly requests: RecordedRequest[] = [];
  readonly #server: http.Server;
  readonly #opts: FakeApiServerOptions;
  readonly #watchers = new Set<Watcher>();
  readonly #faults: Fault[] = [];
  readonly #snapshots = new Map<string, { rv: number; items: StoredObject[] }>();
  /** When true, every watch is answered with an empty 200 that ends at once. */
  closeWatchesImmediately = false;
  /** When true, watches stay open past their `timeoutSeconds` (a half-open connection, as seen by the client). */
  ignoreWatchTimeouts = false;
  url = '';
  /**
   * When set, sees each request (after authentication) before the normal routes; returning true means
   * it answered itself: hostile responses (hostile-responses.ts) such as endless continue tokens.
   */
  intercept:
    | ((r: RecordedRequest, req: http.IncomingMessage, res: http.ServerResponse) => boolean)
    | undefined;

  private constructor(opts: FakeApiServerOptions, store = new FakeStore()) {
    this.store = store;
    this.#opts = opts;
    const handler = (req: http.IncomingMessage, res: http.ServerResponse) => this.#handle(req, res);
    this.#server = opts.tls ? https.createServer(opts.tls, handler) : http.createServer(handler);
    this.store.onEvent = (ev) => this.#broadcast(ev);
  }

  /** Starts a server on 127.0.0.1 on a free port. */
  static start(opts: FakeApiServerOptions = {}): Promise<FakeApiServer> {
    return FakeApiServer.startOn(0, new FakeStore(), opts);
  }

  /** Starts a server on a given port with a given store: an API server coming back after an outage. */
  static async startOn(
    port: number,
    store: FakeStore,
    opts: FakeApiServerOptions = {},
  ): Promise<FakeApiServer> {
    const s = new FakeApiServer(opts, store);
    await new Promise<void>((resolve, reject) => {
      s.#server.once('error', reject);
      s.#server.listen(port, '127.0.0.1', resolve);
    });
    const bound = (s.#server.address() as AddressInfo).port;
    s.url = `${opts.tls ? 'https' : 'http'}://127.0.0.1:${bound}`;
    return s;
  }

  /** Stops the server and drops every connection. */
  async close(): Promise<void> {
    this.dropWatches('abrupt');
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  /** Answers the next `count` matching requests with `status`. */
  failNext(
    match: { verb?: RecordedRequest['verb']; resource?: string },
    status: number,
    count = 1,
  ) {
    this.#faults.push({ ...match, status, remaining: count });
  }

  /** Ends every open watch: "clean" finishes the chunked body, "abrupt" destroys the socket. */
  dropWatches(how: 'clean' | 'abrupt' = 'clean'): void {
    for (const w of this.#watchers) {
      if (how === 'clean') w.res.end();
      else w.res.socket?.destroy();
    }
    this.#watchers.clear();
  }

  /** Sends a BOOKMARK at the current version to every watch that asked for them. */
  bookmark(): void {
    for (const w of this.#watchers) {
      if (!w.bookmarks) continue;
      const meta = KINDS[w.resource] ?? { kind: 'Unknown', apiVersion: 'v1' };
      const object = { ...meta, metadata: { resourceVersion: String(this.store.rv) } };
      w.res.write(`${JSON.stringify({ type: 'BOOKMARK', object })}\n`);
    }
  }

  /** Writes a raw line to every open watch of `resource`: for malformed-input tests. */
  sendRaw(resource: string, line: string): void {
    for (const w of this.#watchers) if (w.resource === resource) w.res.write(`${line}\n`);
  }

  /** Forgets every outstanding continue token: the next page request gets 410. */
  expireContinueTokens(): void {
    this.#snapshots.clear();
  }

  /** Requests recorded for `verb` on `resource`. */
  count(verb: RecordedRequest['verb'], resource: string): number {
    return this.requests.filter((r) => r.verb === verb && r.resource === resource).length;
  }

  /** Open watches, optionally of one resource. */
  openWatches(resource?: string): number {
    return [...this.#watchers].filter((w) => !resource || w.resource === resource).length;
  }

  #status(res: http.ServerResponse, code: number, reason: string, message: string): void {
    const body = { kind: 'Status', apiVersion: 'v1', status: 'Failure', message, reason, code };
    res.writeHead(code, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  }

  #handle(req: http.IncomingMessage, res: http.ServerResponse) {
    const r = parseRequest(req);
    if (!r)
      return this.#status(res, 404, 'NotFound', 'the server could not find the requested resource');
    this.requests.push(r);
    if (this.#opts.token && r.authorization !== `Bearer ${this.#opts.token}`) {
      return this.#status(res, 401, 'Unauthorized', 'Unauthorized');
    }
    if (this.intercept?.(r, req, res)) return;
    const fault = this.#faults.find(
      (f) =>
        f.remaining > 0 &&
        (!f.verb || f.verb === r.verb) &&
        (!f.resource || f.resource === r.resource),
    );
    if (fault) {
      fault.remaining--;
      return this.#status(res, fault.status, 'InternalError', `injected failure ${fault.status}`);
    }
    const base = r.subresource ? r.resource.slice(0, -r.subresource.length - 1) : r.resource;
    if (!KINDS[base] || (r.subresource && (r.subresource !== 'scale' || !SCALABLE.has(base)))) {
      return this.#status(res, 404, 'NotFound', `unknown resource ${r.resource}`);
    }
    if (r.subresource) return this.#scale(r, base, req, res);
    let matches: Matcher;
    try {
      const label = labelMatcher(r.query.get('labelSelector'));
      const field = fieldMatcher(r.query.get('fieldSelector'));
      const ns = r.namespace;
      matches = (o) =>
        (!ns || (o as StoredObject).metadata.namespace === ns) && label(o) && field(o);
    } catch (err) {
      return this.#status(res, 400, 'BadRequest', (err as Error).message);
    }
    if (r.verb === 'list') return this.#list(r, matches, res);
    if (r.verb === 'watch') return this.#watch(r, matches, res);
    if (r.verb === 'get') {
      const obj = this.store.get(r.resource, r.namespace, r.name as string);
      if (!obj) return this.#status(res, 404, 'NotFound', `${r.resource} "${r.name}" not found`);
      return this.#json(res, 200, obj);
    }
    if (r.verb === 'create' || r.verb === 'patch' || r.verb === 'update') {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () =>
        this.#write(r, req.headers['content-type'] ?? '', Buffer.concat(chunks), res),
      );
      return;
    }
    const deleted = this.store.delete(r.resource, r.namespace, r.name as string);
    if (!deleted) return this.#status(res, 404, 'NotFound', `${r.resource} "${r.name}" not found`);
    this.#json(res, 200, deleted);
  }

  /** GET, PUT and PATCH of `<workload>/scale`: reads and sets the workload's `spec.replicas`. */
  #scale(r: RecordedRequest, base: string, req: http.IncomingMessage, res: http.ServerResponse) {
    const current = this.store.get(base, r.namespace, r.name as string);
    if (!current) return this.#status(res, 404, 'NotFound', `${base} "${r.name}" not found`);
    if (r.verb === 'get') return this.#json(res, 200, scaleOf(current));
    if (r.verb !== 'update' && r.verb !== 'patch') {
      return this.#status(res, 405, 'MethodNotAllowed', `${r.verb} is not allowed on scale`);
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let payload: StoredObject;
      try {
        payload = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        return this.#status(res, 400, 'BadRequest', 'invalid JSON body');
      }
      let next: StoredObject;
      if (r.verb === 'update') next = payload;
      else {
        const contentType = req.headers['content-type'] ?? '';
        try {
          next = contentType.startsWith('application/json-patch+json')
            ? (jsonPatch(scaleOf(current), payload) as StoredObject)
            : (mergePatch(scaleOf(current), payload) as StoredObject);
        } catch (err) {
          if (!(err instanceof PatchConflictError)) throw err;
          return this.#status(res, 422, 'Invalid', err.message);
        }
      }
      const rv = next?.metadata?.resourceVersion;
      if (r.verb === 'update' && rv && rv !== current.metadata.resourceVersion) {
        return this.#conflict(res, base, r.name as string);
      }
      const replicas = (next?.spec as { replicas?: unknown } | undefined)?.replicas ?? 0;
      if (typeof replicas !== 'number' || !Number.isInteger(replicas) || replicas < 0) {
        return this.#status(res, 422, 'Invalid', 'spec.replicas: Invalid value');
      }
      const updated = structuredClone(current);
      updated.spec = { ...(updated.spec as object), replicas };
      this.#json(res, 200, scaleOf(this.store.update(base, updated)));
    });
  }

  #conflict(res: http.ServerResponse, resource: string, name: string): void {
    this.#status(
      res,
      409,
      'Conflict',
      `Operation cannot be fulfilled on ${resource} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
    );
  }

  #json(res: http.ServerResponse, code: number, body: unknown): void {
    res.writeHead(code, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  }

  #write(r: RecordedRequest, contentType: string, body: Buffer, res: http.ServerResponse) {
    let payload: unknown;
    try {
      payload = JSON.parse(body.toString('utf8'));
    } catch {
      return this.#status(res, 400, 'BadRequest', 'invalid JSON body');
    }
    const ns = r.namespace;
    if (r.verb === 'create') {
      const obj = payload as StoredObject;
      if (typeof obj?.metadata?.name !== 'string') {
        return this.#status(res, 422, 'Invalid', 'metadata.name: Required value');
      }
      if (ns) obj.metadata.namespace = ns;
      if (this.store.get(r.resource, ns, obj.metadata.name)) {
        return this.#status(
          res,
          409,
          'AlreadyExists',
          `${r.resource} "${obj.metadata.name}" already exists`,
        );
      }
      return this.#json(res, 201, this.store.create(r.resource, obj));
    }
    const current = this.store.get(r.resource, ns, r.name as string);
    if (!current) return this.#status(res, 404, 'NotFound', `${r.resource} "${r.name}" not found`);
    let next: StoredObject;
    if (r.verb === 'update') {
      next = payload as StoredObject;
      const rv = next?.metadata?.resourceVersion;
      if (rv && rv !== current.metadata.resourceVersion) {
        return this.#conflict(res, r.resource, r.name as string);
      }
    } else if (contentType.startsWith('application/json-patch+json')) {
      try {
        next = jsonPatch(structuredClone(current), payload) as StoredObject;
      } catch (err) {
        if (!(err instanceof PatchConflictError)) throw err;
        return this.#status(res, 422, 'Invalid', err.message);
      }
    } else next = mergePatch(structuredClone(current), payload) as StoredObject;
    this.#json(res, 200, this.store.update(r.resource, next));
  }

  #list(r: RecordedRequest, matches: Matcher, res: http.ServerResponse) {
    const limit = Number(r.query.get('limit') ?? '0');
    const cont = r.query.get('continue');
    let snapshot: { rv: number; items: StoredObject[] };
    let offset = 0;
    if (cont) {
      const [id, at] = cont.split(':');
      const found = this.#snapshots.get(id ?? '');
      if (!found) {
        return this.#status(res, 410, 'Expired', 'The provided continue parameter is too old');
      }
      snapshot = found;
      offset = Number(at);
    } else {
      snapshot = { rv: this.store.rv, items: this.store.list(r.resource).filter(matches) };
    }
    const end = limit > 0 ? Math.min(snapshot.items.length, offset + limit) : snapshot.items.length;
    const metadata: { resourceVersion: string; continue?: string } = {
      resourceVersion: String(snapshot.rv),
    };
    if (end < snapshot.items.length) {
      const id = cont ? (cont.split(':')[0] as string) : randomUUID();
      this.#snapshots.set(id, snapshot);
      metadata.continue = `${id}:${end}`;
    }
    const { kind, apiVersion } = KINDS[r.resource] as { kind: string; apiVersion: string };
    this.#json(res, 200, {
      kind: `${kind}List`,
      apiVersion,
      metadata,
      items: snapshot.items.slice(offset, end),
    });
  }

  #watch(r: RecordedRequest, matches: Matcher, res: http.ServerResponse) {
    const rvParam = r.query.get('resourceVersion') ?? '';
    const from = Number(rvParam);
    const tooOld = rvParam !== '' && rvParam !== '0' && from < this.store.compactedRv;
    if (tooOld && this.#opts.goneAsHttpStatus) {
      return this.#status(
        res,
        410,
        'Expired',
        `too old resource version: ${from} (${this.store.compactedRv})`,
      );
    }
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    res.flushHeaders();
    if (this.closeWatchesImmediately) return void res.end();
    if (tooOld) {
      const status = {
        kind: 'Status',
        apiVersion: 'v1',
        status: 'Failure',
        message: `too old resource version: ${from} (${this.store.compactedRv})`,
        reason: 'Expired',
        code: 410,
      };
      res.end(`${JSON.stringify({ type: 'ERROR', object: status })}\n`);
      return;
    }
    const w: Watcher = {
      resource: r.resource,
      namespace: r.namespace,
      matches,
      bookmarks: r.query.get('allowWatchBookmarks') === 'true',
      res,
    };
    if (rvParam === '' || rvParam === '0') {
      for (const obj of this.store.list(r.resource)) {
        if (matches(obj)) res.write(`${JSON.stringify({ type: 'ADDED', object: obj })}\n`);
      }
    } else {
      for (const ev of this.store.historySince(r.resource, from)) this.#send(w, ev);
    }
    this.#watchers.add(w);
    const timeout = Number(r.query.get('timeoutSeconds') ?? '0');
    const timer =
      timeout > 0 && !this.ignoreWatchTimeouts
        ? setTimeout(() => res.end(), timeout * 1000)
        : undefined;
    res.on('close', () => {
      clearTimeout(timer);
      this.#watchers.delete(w);
    });
  }

  #broadcast(ev: WatchEvent): void {
    for (const w of this.#watchers) if (w.resource === ev.resource) this.#send(w, ev);
  }

  #send(w: Watcher, ev: WatchEvent): void {
    const was = ev.old !== undefined && w.matches(ev.old);
    const is = ev.type !== 'DELETED' && w.matches(ev.obj);
    let type: string | undefined;
    if (ev.type === 'DELETED') type = w.matches(ev.obj) ? 'DELETED' : undefined;
    else if (was && is) type = 'MODIFIED';
    else if (is) type = 'ADDED';
    else if (was) type = 'DELETED';
    if (type) w.res.write(`${JSON.stringify({ type, object: ev.obj })}\n`);
  }
}
