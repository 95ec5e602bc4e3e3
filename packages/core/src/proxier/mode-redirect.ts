import { PortalError } from '../errors.js';
import type { Portal, PortalKind, PortalManager } from '../hooks/portal-manager.js';
import type { ServiceInfo } from '../model/service-info.js';
import type { PortAllocator } from '../ports/port-allocator.js';
import { type Listener, type ModeEntry, ServicePortMode } from './mode.js';
import { PROXIER_EVENT_REASONS, type ProxierContext, type SyncRun } from './proxier-context.js';
import type { ServiceInfoImpl } from './service-info-impl.js';
import type { ServicePortSpec } from './service-port-spec.js';

/** A capture rule and the listeners whose claims must be held before it may be installed. */
interface PortalSlot {
  portal: Portal;
  open: boolean;
  /** Installing a rule for an address another Service owns would steal its traffic. */
  requires: Listener[];
}

interface RedirectEntry extends ModeEntry {
  /** The proxy socket on listenIP, once opened. */
  info?: ServiceInfoImpl;
  /** The port asked of the allocator for `info`, released when it closes. */
  allocatedPort: number;
  /**
   * The load-balancer IPs' own proxy socket, when the Service has source ranges: one socket serves
   * every address behind redirect rules and cannot tell which one a client used, so the
   * load-balancer IPs' rules point at a second socket that admits only `loadBalancerSourceRanges`.
   */
  lbInfo?: ServiceInfoImpl;
  /** The port asked of the allocator for `lbInfo`. */
  lbAllocatedPort: number;
  /** True once the claims and rules were worked out (both sockets open). */
  planned: boolean;
  /**
   * The proxying listeners it must own: the node port on each node-port address, and the Service
   * port on a Service IP local to this host. The reference held such sockets without accepting, so
   * clients that bypassed the NAT rules hung in the backlog (its quirk 9); here they are served.
   */
  claims: Listener[];
  portals: PortalSlot[];
}

/** What the redirect mode needs beyond the shared context. */
export interface RedirectModeOptions {
  listenIP: string;
  allocator: PortAllocator;
  portals: PortalManager;
}

/**
 * Redirect mode (Linux userspace kube-proxy): one proxy socket per Service port on `listenIP` with a
 * port from the allocator, a capture rule per Service address through the PortalManager (cluster IP,
 * each external IP, each load-balancer IP, the node port), and proxying listeners for node ports and
 * local Service IPs, claimed with conflict detection.
 */
export class RedirectMode extends ServicePortMode<RedirectEntry> {
  /** See {@link ServicePortMode.mode}. */
  readonly mode = 'redirect' as const;
  readonly #listenIP: string;
  readonly #allocator: PortAllocator;
  readonly #portals: PortalManager;

  constructor(ctx: ProxierContext, options: RedirectModeOptions) {
    super(ctx);
    this.#listenIP = options.listenIP;
    this.#allocator = options.allocator;
    this.#portals = options.portals;
  }

  protected newEntry(spec: ServicePortSpec): RedirectEntry {
    return {
      spec,
      lbKnown: false,
      allocatedPort: 0,
      lbAllocatedPort: 0,
      planned: false,
      claims: [],
      portals: [],
    };
  }

  protected async ensure(entry: RedirectEntry, run: SyncRun): Promise<boolean> {
    const { spec } = entry;
    if (entry.info === undefined) {
      const opened = await this.#openProxyPort(spec, { ip: spec.clusterIP, port: spec.port });
      if (opened === undefined) return false;
      [entry.info, entry.allocatedPort] = opened;
    }
    if (entry.lbInfo === undefined && filtersLoadBalancerIPs(spec)) {
      const portal = { ip: spec.loadBalancerIPs[0] ?? '', port: spec.port };
      const opened = await this.#openProxyPort(spec, portal, spec.loadBalancerSourceRanges);
      if (opened === undefined) return false;
      [entry.lbInfo, entry.lbAllocatedPort] = opened;
    }
    if (!entry.planned) {
      entry.planned = true;
      this.#plan(entry, entry.info.proxyPort, entry.lbInfo?.proxyPort, run);
    }
    let complete = true;
    for (const claim of entry.claims) {
      if (claim.state !== 'open' && !(await this.openListener(spec, claim, run))) complete = false;
    }
    for (const slot of entry.portals) {
      if (slot.open || !slot.requires.every((claim) => claim.state === 'open')) continue;
      try {
        await this.#portals.open(slot.portal);
        slot.open = true;
      } catch (error) {
        complete = false;
        this.warn(spec, PROXIER_EVENT_REASONS.portalFailed, error);
      }
    }
    return complete;
  }

  protected async teardown(entry: RedirectEntry, run: SyncRun): Promise<void> {
    const { spec } = entry;
    entry.info?.stop();
    entry.lbInfo?.stop();
    // Rules first, so that nothing is redirected to a socket about to close. A rule that fails to
    // go still lets the socket close (the reference kept the old proxy running: its quirk 3).
    for (const slot of entry.portals) {
      if (!slot.open) continue;
      slot.open = false;
      try {
        await this.#portals.close(slot.portal);
      } catch (error) {
        const err = error instanceof PortalError ? error : new PortalError(spec.key, 'close');
        this.ctx.log.error(`${spec.key}: ${err.message}`, error);
      }
    }
    for (const claim of entry.claims) await this.closeListener(spec, claim, run);
    if (entry.info !== undefined) {
      await this.ctx.closeProxy(entry.info, spec.key);
      this.#allocator.release(entry.allocatedPort);
    }
    if (entry.lbInfo !== undefined) {
      await this.ctx.closeProxy(entry.lbInfo, spec.key);
      this.#allocator.release(entry.lbAllocatedPort);
    }
  }

  /**
   * Opens a proxy socket on listenIP with a port from the allocator, for `portal`; undefined (with a
   * Warning event, the port given back) when either fails.
   */
  async #openProxyPort(
    spec: ServicePortSpec,
    portal: { ip: string; port: number },
    allowedSources?: readonly string[],
  ): Promise<[ServiceInfoImpl, number] | undefined> {
    let port: number;
    try {
      port = this.#allocator.allocateNext();
    } catch (error) {
      this.warn(spec, PROXIER_EVENT_REASONS.portAllocationFailed, error);
      return undefined;
    }
    try {
      const info = await this.ctx.openProxy(
        spec,
        this.#listenIP,
        port,
        { ...portal, isExternal: false },
        allowedSources,
      );
      return [info, port];
    } catch (error) {
      // The reference leaked the port here (its quirk 2).
      this.#allocator.release(port);
      this.warn(spec, PROXIER_EVENT_REASONS.socketOpenFailed, error);
      return undefined;
    }
  }

  protected entryInfos(entry: RedirectEntry): ServiceInfoImpl[] {
    const infos: ServiceInfoImpl[] = entry.info === undefined ? [] : [entry.info];
    if (entry.lbInfo !== undefined) infos.push(entry.lbInfo);
    for (const claim of entry.claims)
      if (claim.info && claim.state === 'open') infos.push(claim.info);
    return infos;
  }

  protected publicInfos(entry: RedirectEntry): ServiceInfo[] {
    const infos: ServiceInfo[] = entry.info === undefined ? [] : [entry.info];
    if (entry.lbInfo !== undefined) infos.push(entry.lbInfo);
    return infos;
  }

  /**
   * The proxy socket's info, or with `portalIP` naming a claimed listener's address, that one's, or
   * with a load-balancer IP of a Service with source ranges, the load-balancer IPs' socket's.
   */
  protected lookup(entry: RedirectEntry, portalIP: string | undefined): ServiceInfo | undefined {
    if (portalIP !== undefined) {
      const claim = entry.claims.find((c) => c.state === 'open' && (c.ip ?? '') === portalIP);
      if (claim?.info) return claim.info;
      if (entry.lbInfo !== undefined && entry.spec.loadBalancerIPs.includes(portalIP)) {
        return entry.lbInfo;
      }
    }
    return entry.info;
  }

  /**
   * Works out the claims and rules of an entry once its proxy ports are known: `lbProxyPort`, when
   * given, is where the load-balancer IPs' rules send (their filtered socket), `proxyPort` the rest.
   */
  #plan(
    entry: RedirectEntry,
    proxyPort: number,
    lbProxyPort: number | undefined,
    run: SyncRun,
  ): void {
    const { spec } = entry;
    const portal = (kind: PortalKind, ip: string | null, port: number): Portal => ({
      service: spec.name,
      protocol: spec.protocol,
      kind,
      ip,
      port,
      proxyIP: this.#listenIP,
      proxyPort: kind === 'load-balancer' && lbProxyPort !== undefined ? lbProxyPort : proxyPort,
    });
    const addresses: [PortalKind, string][] = [
      ['cluster-ip', spec.clusterIP],
      ...spec.externalIPs.map((ip): [PortalKind, string] => ['external-ip', ip]),
      ...spec.loadBalancerIPs.map((ip): [PortalKind, string] => ['load-balancer', ip]),
    ];
    const seen = new Set<string>();
    for (const [kind, ip] of addresses) {
      if (seen.has(ip)) continue;
      seen.add(ip);
      const requires: Listener[] = [];
      if (run.isLocal(ip)) {
        const claim: Listener = { ip, port: spec.port, kind, state: 'none' };
        entry.claims.push(claim);
        requires.push(claim);
      }
      entry.portals.push({ portal: portal(kind, ip, spec.port), open: false, requires });
    }
    if (spec.nodePort !== 0) {
      const requires = this.ctx.nodePortAddresses.map(
        (ip): Listener => ({ ip, port: spec.nodePort, kind: 'node-port', state: 'none' }),
      );
      entry.claims.push(...requires);
      entry.portals.push({
        portal: portal('node-port', null, spec.nodePort),
        open: false,
        requires,
      });
    }
  }
}

/**
 * Whether a Service port's load-balancer IPs need a socket of their own: they have source ranges to
 * enforce, and at least one of them is captured by a rule (rather than a local listener of its own,
 * which filters by itself). The check is for any load-balancer IP: a local one is claimed and
 * filtered at its listener, the rest go to the filtered socket.
 */
function filtersLoadBalancerIPs(spec: ServicePortSpec): boolean {
  return spec.loadBalancerSourceRanges.length > 0 && spec.loadBalancerIPs.length > 0;
}
