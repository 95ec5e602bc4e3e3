import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { healthBody, type ProxierHealth } from './healthz-state.js';
import { createLimitedServer, type HttpLimits } from './http-guard.js';

/**
 * The health server (`healthzBindAddress`, 0.0.0.0:10256 by default), kube-proxy's two handlers:
 * `/healthz` for load-balancer health checks (proxier health and node eligibility, and 503 while the
 * daemon drains, so a load balancer stops sending new clients), and `/livez` for liveness probes
 * (proxier health only: a draining or ineligible node is still alive). Any other path is a 404;
 * methods are not checked, as in kube-proxy.
 */

/** Counts responses per code (kubeproxy_proxy_healthz_total / _livez_total). */
export interface HealthResponseObserver {
  healthzResponse(code: number): void;
  livezResponse(code: number): void;
}

/** Options of {@link createHealthServer}. */
export interface HealthServerOptions {
  health: ProxierHealth;
  /** False when the node is being deleted (cluster sources); only /healthz reads it. Default: always eligible. */
  nodeEligible?: () => boolean;
  /** True once shutdown began: /healthz answers 503 so new traffic goes elsewhere. */
  draining?: () => boolean;
  observer?: HealthResponseObserver;
  /** Connection cap, timeouts and descriptor reserve (http-guard.ts); each has a default. */
  limits?: HttpLimits;
}

/** Writes Go's http.NotFound answer. */
export function notFound(res: ServerResponse): void {
  res.writeHead(404, {
    'Content-Type': 'text/plain; charset=utf-8',
    'X-Content-Type-Options': 'nosniff',
  });
  res.end('404 page not found\n');
}

/** The request handler, separate from the server so it can be mounted elsewhere. */
export function healthHandler(options: HealthServerOptions) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    if (path !== '/healthz' && path !== '/livez') {
      notFound(res);
      return;
    }
    const status = options.health.status();
    let healthy = status.healthy;
    let eligible: boolean | undefined;
    if (path === '/healthz') {
      eligible = safe(options.nodeEligible, true);
      healthy = healthy && eligible && !safe(options.draining, false);
    }
    const code = healthy ? 200 : 503;
    res.writeHead(code, {
      'Content-Type': 'application/json',
      'X-Content-Type-Options': 'nosniff',
    });
    res.end(healthBody({ ...status, healthy }, options.health.startedAt, eligible));
    try {
      if (path === '/healthz') options.observer?.healthzResponse(code);
      else options.observer?.livezResponse(code);
    } catch {
      // counting must never fail a probe
    }
  };
}

function safe(fn: (() => boolean) | undefined, fallback: boolean): boolean {
  try {
    return fn === undefined ? fallback : fn();
  } catch {
    return fallback;
  }
}

/** An unstarted HTTP server for the health endpoints; start it with a RetryingListener. */
export function createHealthServer(options: HealthServerOptions): Server {
  return createLimitedServer(healthHandler(options), options.limits);
}
