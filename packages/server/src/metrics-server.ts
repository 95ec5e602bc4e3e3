import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import { type ProfilingSources, serveProfiling } from './debug-profiling.js';
import { notFound } from './health-server.js';
import { createLimitedServer, type HttpLimits } from './http-guard.js';
import { STATUS_PAGE_CSP, STATUS_PAGE_HTML } from './status-page.js';

/**
 * The metrics server (`metricsBindAddress`, 127.0.0.1:10249 by default): kube-proxy's paths.
 * `/metrics` (Prometheus text), `/healthz` (the generic "ping" check: it says the process answers,
 * not that the proxy is in sync; that is the health server's job), `/proxyMode` and `/configz`; and
 * ours, `/status` (a live HTML page) and `/status.json` (its model) when a status source is given;
 * `/debug/pprof/…` with `enableProfiling` (debug-profiling.ts).
 * None of it is authenticated, which is why it listens on loopback unless configured otherwise.
 */

/** What `/metrics` reads: a prom-client Registry, or a merge of several (a `--workers` primary). */
export type MetricsSource = Pick<Registry, 'metrics' | 'contentType'>;

/** Options of {@link createMetricsServer}. */
export interface MetricsServerOptions {
  registry: MetricsSource;
  /** The /proxyMode body: "userspace" or "service-port-portal". */
  proxyMode: string;
  /** The /configz body, computed per request (the configuration is immutable, but cheap to render). */
  configz: () => string;
  /** The `/status.json` model (status-model.ts); without it `/status` and `/status.json` are 404. */
  status?: () => Promise<unknown>;
  /** Connection cap, timeouts and descriptor reserve (http-guard.ts); each has a default. */
  limits?: HttpLimits;
  /** Serves `/debug/pprof/…` (debug-profiling.ts) when given: `enableProfiling`. Default none. */
  profiling?: ProfilingSources;
}

/** How long a /metrics request may take in all: gathering can take a while on a busy daemon. */
export const METRICS_REQUEST_TIMEOUT_MS = 30_000;

const TEXT = { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' };

function healthz(url: URL, res: ServerResponse): void {
  const excluded = url.searchParams.getAll('exclude');
  const verbose = url.searchParams.has('verbose');
  const warnings = excluded
    .filter((name) => name !== 'ping')
    .map((name) => `warn: some health checks cannot be excluded: no matches for "${name}"\n`);
  if (!verbose) {
    res.writeHead(200, TEXT);
    res.end('ok');
    return;
  }
  const ping = excluded.includes('ping') ? '[+]ping excluded: ok\n' : '[+]ping ok\n';
  res.writeHead(200, TEXT);
  res.end(`${ping}${warnings.join('')}healthz check passed\n`);
}

/** The request handler, separate from the server so it can be mounted elsewhere. */
export function metricsHandler(options: MetricsServerOptions) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (options.profiling !== undefined && serveProfiling(options.profiling, url, req, res)) return;
    switch (url.pathname) {
      case '/metrics':
        options.registry.metrics().then(
          (text) => {
            res.writeHead(200, { 'Content-Type': options.registry.contentType });
            res.end(text);
          },
          (err: unknown) => {
            res.writeHead(500, TEXT);
            res.end(
              `error gathering metrics: ${err instanceof Error ? err.message : String(err)}\n`,
            );
          },
        );
        return;
      case '/healthz':
      case '/healthz/ping':
        healthz(url, res);
        return;
      case '/proxyMode':
        res.writeHead(200, TEXT);
        res.end(options.proxyMode);
        return;
      case '/configz': {
        let body: string;
        try {
          body = options.configz();
        } catch (err) {
          res.writeHead(500, TEXT);
          res.end(`error marshaling json: ${err instanceof Error ? err.message : String(err)}`);
          return;
        }
        res.writeHead(200, {
          'Content-Type': 'application/json',
          'X-Content-Type-Options': 'nosniff',
        });
        res.end(body);
        return;
      }
      case '/status':
        if (options.status === undefined) break;
        res.writeHead(200, {
          'Content-Type': 'text/html; charset=utf-8',
          'Content-Security-Policy': STATUS_PAGE_CSP,
          'X-Content-Type-Options': 'nosniff',
          'Cache-Control': 'no-store',
        });
        res.end(STATUS_PAGE_HTML);
        return;
      case '/status.json':
        if (options.status === undefined) break;
        options.status().then(
          (model) => {
            res.writeHead(200, {
              'Content-Type': 'application/json',
              'X-Content-Type-Options': 'nosniff',
              'Cache-Control': 'no-store',
            });
            res.end(`${JSON.stringify(model)}\n`);
          },
          (err: unknown) => {
            res.writeHead(500, TEXT);
            res.end(`error building status: ${err instanceof Error ? err.message : String(err)}\n`);
          },
        );
        return;
      default:
        break;
    }
    notFound(res);
  };
}

/** An unstarted HTTP server for the metrics endpoints; start it with a RetryingListener. */
export function createMetricsServer(options: MetricsServerOptions): Server {
  return createLimitedServer(metricsHandler(options), {
    requestTimeoutMs: METRICS_REQUEST_TIMEOUT_MS,
    ...options.limits,
  });
}
