import { isIP } from 'node:net';
import { networkInterfaces as osNetworkInterfaces } from 'node:os';
import { InvalidOptionError, ProxyOnLocalhostError } from '../errors.js';
import { NoopAddressManager } from '../hooks/address-manager-noop.js';
import { NoopConntrackCleaner } from '../hooks/conntrack-noop.js';
import { EmitterEventRecorder } from '../hooks/event-recorder-emitter.js';
import { NoopPortalManager } from '../hooks/portal-manager-noop.js';
import { RoundRobinLoadBalancer } from '../load-balancing/load-balancer-round-robin.js';
import { componentLogger } from '../logger.js';
import { newPortAllocator } from '../ports/port-allocator-factory.js';
import { parsePortRange } from '../ports/port-range.js';
import type { ProxySocketFactory } from '../sockets/proxy-socket.js';
import { createProxySocketFactory } from '../sockets/proxy-socket-factory.js';
import { EndpointsNotifier } from './endpoints-notifier.js';
import type { ModeEntry, ServicePortMode } from './mode.js';
import { PortalMode } from './mode-per-address.js';
import { RedirectMode } from './mode-redirect.js';
import { type NetworkInterfacesFn, resolveNodePortAddresses } from './node-port-addresses.js';
import { NodePortClaims } from './node-port-claims.js';
import type { Proxier, ProxierOptions, ProxyMode } from './proxier.js';
import { ProxierContext } from './proxier-context.js';
import { UserspaceProxier } from './proxier-userspace.js';

/** The defaults of {@link ProxierOptions}, for documentation and for the daemon's flags. */
export const DEFAULT_PROXIER_OPTIONS = {
  mode: 'service-port-portal',
  listenIP: '0.0.0.0',
  portRange: '',
  syncPeriodMs: 30_000,
  minSyncPeriodMs: 1_000,
  udpIdleTimeoutMs: 10_000,
} as const satisfies Partial<ProxierOptions>;

/**
 * What a test or an unusual host injects in place of the environment; integrators never need it.
 * Passed as the third argument of {@link newCustomProxier}.
 */
export interface ProxierEnvironment {
  /** Default `os.networkInterfaces`: local addresses, node-port addresses, "primary" IPs. */
  networkInterfaces?: NetworkInterfacesFn;
  /** Monotonic clock in ms for the sync runner and sync durations. Default `performance.now`. */
  now?: () => number;
}

/**
 * Builds a Proxier with the default proxy sockets (TCP through node:net, UDP through node:dgram, tuned
 * by `opts.proxySocket`).
 * @throws InvalidOptionError, InvalidPortRangeError or ProxyOnLocalhostError (as rejections) for bad
 * options; nothing is opened before the options are known to be good.
 */
export async function newProxier(opts: ProxierOptions = {}): Promise<Proxier> {
  const factory = createProxySocketFactory({
    ...(opts.proxySocket ?? {}),
    ...(opts.logger ? { logger: opts.logger } : {}),
  });
  return newCustomProxier(opts, factory);
}

/**
 * Builds a Proxier whose proxy sockets come from `makeProxySocket`: the way to plug in an idling
 * socket, an SCTP socket, or one that counts and limits (see examples/custom-proxy-socket). The
 * factory is also used for the listeners on node ports and, in service-port-portal mode, on every
 * Service address. Call `syncLoop()` to start syncing; register the Proxier with a ServiceConfig and
 * an EndpointsConfig or EndpointSliceConfig to feed it.
 * @throws InvalidOptionError, InvalidPortRangeError or ProxyOnLocalhostError (as rejections).
 */
export async function newCustomProxier(
  opts: ProxierOptions,
  makeProxySocket: ProxySocketFactory,
  env: ProxierEnvironment = {},
): Promise<Proxier> {
  if (typeof opts !== 'object' || opts === null) {
    throw new InvalidOptionError('options', 'expected an object');
  }
  if (typeof makeProxySocket !== 'function') {
    throw new InvalidOptionError('makeProxySocket', 'expected a function');
  }
  const mode: ProxyMode = opts.mode ?? DEFAULT_PROXIER_OPTIONS.mode;
  if (mode !== 'redirect' && mode !== 'service-port-portal') {
    throw new InvalidOptionError(
      'mode',
      `expected "redirect" or "service-port-portal", got "${String(mode)}"`,
    );
  }
  const syncPeriodMs = opts.syncPeriodMs ?? DEFAULT_PROXIER_OPTIONS.syncPeriodMs;
  const minSyncPeriodMs = opts.minSyncPeriodMs ?? DEFAULT_PROXIER_OPTIONS.minSyncPeriodMs;
  const udpIdleTimeoutMs = opts.udpIdleTimeoutMs ?? DEFAULT_PROXIER_OPTIONS.udpIdleTimeoutMs;
  checkDuration('minSyncPeriodMs', minSyncPeriodMs, 0);
  checkDuration('syncPeriodMs', syncPeriodMs, 1);
  checkDuration('udpIdleTimeoutMs', udpIdleTimeoutMs, 1);
  if (syncPeriodMs < minSyncPeriodMs) {
    throw new InvalidOptionError(
      'syncPeriodMs',
      `must be at least minSyncPeriodMs (${minSyncPeriodMs}), got ${syncPeriodMs}`,
    );
  }
  const listenIP = opts.listenIP ?? DEFAULT_PROXIER_OPTIONS.listenIP;
  if (typeof listenIP !== 'string' || isIP(listenIP) === 0) {
    throw new InvalidOptionError('listenIP', `expected an IP address, got "${String(listenIP)}"`);
  }
  if (mode === 'redirect' && opts.portals !== undefined && isLocalhost(listenIP)) {
    throw new ProxyOnLocalhostError(listenIP);
  }
  for (const ip of opts.nodeIPs ?? []) {
    if (typeof ip !== 'string' || isIP(ip) === 0) {
      throw new InvalidOptionError('nodeIPs', `"${String(ip)}" is not an IP address`);
    }
  }
  const networkInterfaces = env.networkInterfaces ?? osNetworkInterfaces;
  const nodePortAddresses = resolveNodePortAddresses(opts.nodePortAddresses, {
    ...(opts.nodeIPs ? { nodeIPs: opts.nodeIPs } : {}),
    networkInterfaces,
  });
  // Parsed in both modes, so that a typo is reported even where the range is not used.
  const portRange = parsePortRange(opts.portRange ?? DEFAULT_PROXIER_OPTIONS.portRange);

  const log = componentLogger(opts.logger, 'proxier');
  const lb =
    opts.loadBalancer ?? new RoundRobinLoadBalancer(opts.logger ? { logger: opts.logger } : {});
  const ctx = new ProxierContext({
    log,
    lb,
    notifier: new EndpointsNotifier(lb, log),
    makeProxySocket,
    claims: new NodePortClaims(),
    recorder: opts.recorder ?? new EmitterEventRecorder(),
    udpIdleTimeoutMs,
    networkInterfaces,
    nodePortAddresses,
  });
  let modeImpl: ServicePortMode<ModeEntry>;
  if (mode === 'redirect') {
    modeImpl = new RedirectMode(ctx, {
      listenIP,
      allocator: newPortAllocator(portRange, opts.logger ? { logger: opts.logger } : {}),
      portals: opts.portals ?? new NoopPortalManager(),
    });
  } else {
    if (opts.portals !== undefined) {
      log.warn('the portals option is ignored in service-port-portal mode');
    }
    modeImpl = new PortalMode(ctx, opts.addresses ?? new NoopAddressManager());
  }
  const where = nodePortAddresses.map((ip) => ip ?? '*').join(', ') || 'nowhere';
  log.info(`${mode} mode; node ports on ${where}`);
  return new UserspaceProxier({
    ctx,
    mode: modeImpl,
    conntrack: opts.conntrack ?? new NoopConntrackCleaner(),
    syncPeriodMs,
    minSyncPeriodMs,
    now: env.now ?? (() => performance.now()),
  });
}

function checkDuration(option: string, value: unknown, min: number): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min) {
    throw new InvalidOptionError(
      option,
      `expected a finite number ≥ ${min} (ms), got ${String(value)}`,
    );
  }
}

/** What the reference refused: redirect rules cannot send traffic to these. */
function isLocalhost(ip: string): boolean {
  return ip === '127.0.0.1' || ip === '::1';
}
