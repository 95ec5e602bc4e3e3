import type http from 'node:http';

/** Request parsing and patch application for the fake API server. */

/** One request as the authorizer would see it. */
export interface RecordedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  /** The API group ("" for core). */
  group: string;
  /** The resource, with its subresource as RBAC names it: "services", "deployments/scale". */
  resource: string;
  /** The subresource alone ("scale"), if any. */
  subresource: string | undefined;
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
  const [base, name, subresource] = rest;
  if (!base || rest.length > 3) return undefined;
  const resource = subresource ? `${base}/${subresource}` : base;
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
    subresource,
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

/** A JSON patch that cannot be applied: a failed "test", or a "remove" of nothing (HTTP 422). */
export class PatchConflictError extends Error {}

/**
 * RFC 6902 JSON patch, the operations the clients send ("add", "replace", "remove", "test"), with
 * RFC 6901 escapes ("~1" is "/", "~0" is "~"), as the API server applies it: all or nothing.
 */
export function jsonPatch(target: unknown, ops: unknown): unknown {
  for (const op of ops as { op: string; path: string; value?: unknown }[]) {
    const keys = op.path
      .split('/')
      .slice(1)
      .map((k) => k.replaceAll('~1', '/').replaceAll('~0', '~'));
    const last = keys.pop() as string;
    let node = target as Record<string, unknown>;
    for (const k of keys) {
      node[k] ??= {};
      node = node[k] as Record<string, unknown>;
    }
    if (op.op === 'test') {
      if (JSON.stringify(node[last]) !== JSON.stringify(op.value)) {
        throw new PatchConflictError(`test failed at ${op.path}`);
      }
    } else if (op.op === 'remove') {
      if (!(last in node)) throw new PatchConflictError(`nothing to remove at ${op.path}`);
      delete node[last];
    } else node[last] = op.value;
  }
  return target;
}
