import type http from 'node:http';
import type { RecordedRequest } from './api-request.js';
import type { FakeApiServer } from './fake-apiserver.js';

/**
 * Hostile answers the fake API server can give through its `intercept` hook, for the probes of the
 * list pager and the unidler: what a broken or malicious server (or proxy) could send.
 */

/** Every list of `resource` returns one item and a continue token: a new one each page, or always the same. */
export function endlessContinue(
  server: FakeApiServer,
  resource: string,
  how: 'new-token' | 'same-token',
): void {
  let page = 0;
  server.intercept = (r, _req, res) => {
    if (r.verb !== 'list' || r.resource !== resource) return false;
    page++;
    const token = how === 'same-token' ? 'again' : `page-${page}`;
    const item = { metadata: { name: `item-${page}`, namespace: 'ns', resourceVersion: '1' } };
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ metadata: { resourceVersion: '1', continue: token }, items: [item] }));
    return true;
  };
}

/**
 * Lists of `resource` answer 200 and then one byte of a valid body every `intervalMs`, so no idle
 * timeout ever fires. Returns a stop function that clears the timers (the server's close ends the
 * sockets).
 */
export function trickleList(
  server: FakeApiServer,
  resource: string,
  intervalMs: number,
): () => void {
  const timers = new Set<NodeJS.Timeout>();
  server.intercept = (r, _req, res) => {
    if (r.verb !== 'list' || r.resource !== resource) return false;
    const body = `${' '.repeat(1_000_000)}{"metadata":{"resourceVersion":"1"},"items":[]}`;
    res.writeHead(200, { 'content-type': 'application/json' });
    let at = 0;
    const timer = setInterval(() => {
      if (res.destroyed || at >= body.length) {
        clearInterval(timer);
        timers.delete(timer);
        if (!res.destroyed) res.end();
        return;
      }
      res.write(body[at++] as string);
    }, intervalMs);
    timers.add(timer);
    return true;
  };
  return () => {
    for (const t of timers) clearInterval(t);
    timers.clear();
  };
}

/** Requests that `match` are never answered (kept open until the server closes). Returns them as they come. */
export function hang(
  server: FakeApiServer,
  match: (r: RecordedRequest) => boolean,
): http.ServerResponse[] {
  const held: http.ServerResponse[] = [];
  server.intercept = (r, _req, res) => {
    if (!match(r)) return false;
    held.push(res);
    return true;
  };
  return held;
}
