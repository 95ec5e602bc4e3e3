import type http from 'node:http';

/** Request parsing and patch application for the fake API server. */

/** One request as the authorizer would see it. */
export interface RecordedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  /** The API group ("" for core). */
  group: string;
  resource: string;
  namespace: string | undefined;
  name: string | undefined;
  verb: 'get' | 'list' | 'watch' | 'create' | 'update' | 'patch' | 'delete';
  authorization: string | undefined;
}

/** Splits a request into what an authorizer sees: group, resource, namespace, name and verb. */
export function parseRequest(req: http.IncomingMessage): RecordedRequest | undefined {
  const url = new URL(req.url ?? '/', 'http://x');
  const parts = url.pathname.split('/').filter(Boolean);
  let group: string;
  let rest: string[];
  if (parts[0] === 'api' && parts[1] === 'v1') {
    group = '';
    rest = parts.slice(2);
  } else if (parts[0] === 'apis' && parts.length >= 3) {
    group = parts[1] as string;
    rest = parts.slice(3);
  } else return undefined;
  let namespace: string | undefined;
  if (rest[0] === 'namespaces' && rest.length >= 3) {
    namespace = rest[1];
    rest = rest.slice(2);
  }
  const [resource, name] = rest;
  if (!resource) return undefined;
  const method = req.method ?? 'GET';
  const isWatch = url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1';
  const verb: RecordedRequest['verb'] =
    method === 'GET'
      ? name
        ? 'get'
        : isWatch
          ? 'watch'
          : 'list'
      : method === 'POST'
        ? 'create'
        : method === 'PUT'
          ? 'update'
          : method === 'PATCH'
            ? 'patch'
            : 'delete';
  const auth = req.headers.authorization;
  return {
    method,
    path: url.pathname,
    query: url.searchParams,
    group,
    resource,
    namespace,
    name,
    verb,
    authorization: typeof auth === 'string' ? auth : undefined,
  };
}

/** RFC 7386 merge patch. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out = (
    typeof target === 'object' && target !== null && !Array.isArray(target) ? target : {}
  ) as Record<string, unknown>;
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/** RFC 6902 JSON patch, the operations the client sends ("add", "replace", "remove"). */
export function jsonPatch(target: unknown, ops: unknown): unknown {
  for (const op of ops as { op: string; path: string; value?: unknown }[]) {
    const keys = op.path.split('/').slice(1);
    const last = keys.pop() as string;
    let node = target as Record<string, unknown>;
    for (const k of keys) {
      node[k] ??= {};
      node = node[k] as Record<string, unknown>;
    }
    if (op.op === 'remove') delete node[last];
    else node[last] = op.value;
  }
  return target;
}
