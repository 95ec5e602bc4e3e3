import type { AddressManager } from '../hooks/address-manager.js';
import type { PortalKind } from '../hooks/portal-manager.js';
import type { ServiceInfo } from '../model/service-info.js';
import { type Listener, type ModeEntry, ServicePortMode } from './mode.js';
import type { ProxierContext, SyncRun } from './proxier-context.js';
import type { ServiceInfoImpl } from './service-info-impl.js';
import type { ServicePortSpec } from './service-port-spec.js';

/** One listener of a Service port: the Service port on a Service IP, or the node port on an address. */
interface PortalListener extends Listener {
  /** True while this listener holds a reference on its address in the AddressManager. */
  holdsAddress: boolean;
}

interface PortalEntry extends ModeEntry {
  listeners: PortalListener[];
}

/**
 * Service-port-portal mode (the Windows userspace design, and the default): a real listener per
 * Service port and address — the cluster IP, each external IP and each load-balancer ingress IP on
 * the Service port, and the node port on each node-port address — all sharing one load-balancer
 * entry. No NAT rule and no root are needed. A listener's address is made bindable through the
 * AddressManager when it is not already on an interface, and given back when its last listener
 * closes. Every listener is a claim on (address, port, protocol), so two Services asking for one
 * address and port conflict visibly instead of failing with EADDRINUSE.
 */
export class PortalMode extends ServicePortMode<PortalEntry> {
  /** See {@link ServicePortMode.mode}. */
  readonly mode = 'service-port-portal' as const;
  readonly #addresses: AddressManager;
  /** Listeners per address this mode ensured through the AddressManager. */
  readonly #addressRefs = new Map<string, number>();

  constructor(ctx: ProxierContext, addresses: AddressManager) {
    super(ctx);
    this.#addresses = addresses;
  }

  protected newEntry(spec: ServicePortSpec): PortalEntry {
    const listeners: PortalListener[] = [];
    const seen = new Set<string>();
    const add = (kind: PortalKind, ip: string | null, port: number) => {
      const key = `${ip ?? '*'}|${port}`;
      if (seen.has(key)) return;
      seen.add(key);
      // Every field in the literal (`info` too, set once opened): a field added later moves the
      // object's fields out of line (a property array per listener, 40 bytes at 10 000).
      listeners.push({ ip, port, kind, state: 'none', holdsAddress: false, info: undefined });
    };
    add('cluster-ip', spec.clusterIP, spec.port);
    for (const ip of spec.externalIPs) add('external-ip', ip, spec.port);
    for (const ip of spec.loadBalancerIPs) add('load-balancer', ip, spec.port);
    if (spec.nodePort !== 0) {
      for (const ip of this.ctx.nodePortAddresses) add('node-port', ip, spec.nodePort);
    }
    return { spec, lbKnown: false, listeners };
  }

  protected async ensure(entry: PortalEntry, run: SyncRun): Promise<boolean> {
    let complete = true;
    for (const listener of entry.listeners) {
      if (listener.state !== 'open' && !(await this.#open(entry.spec, listener, run))) {
        complete = false;
      }
    }
    return complete;
  }

  protected async teardown(entry: PortalEntry, run: SyncRun): Promise<void> {
    const { spec } = entry;
    for (const listener of entry.listeners) listener.info?.stop();
    for (const listener of entry.listeners) {
      await this.closeListener(spec, listener, run);
      await this.#releaseAddress(listener);
    }
  }

  protected entryInfos(entry: PortalEntry): ServiceInfoImpl[] {
    const infos: ServiceInfoImpl[] = [];
    for (const l of entry.listeners) if (l.state === 'open' && l.info) infos.push(l.info);
    return infos;
  }

  protected publicInfos(entry: PortalEntry): ServiceInfo[] {
    return this.entryInfos(entry);
  }

  /**
   * The listener on `portalIP` ("" for every address), the Service port's before the node port's;
   * without `portalIP`, the cluster-IP listener (or the first open one).
   */
  protected lookup(entry: PortalEntry, portalIP: string | undefined): ServiceInfo | undefined {
    const open = entry.listeners.filter((l) => l.state === 'open');
    const found = portalIP === undefined ? open[0] : open.find((l) => (l.ip ?? '') === portalIP);
    return found?.info;
  }

  /** Opens a listener, first making its address bindable when it is not on an interface. */
  #open(spec: ServicePortSpec, listener: PortalListener, run: SyncRun): Promise<boolean> {
    const { ip } = listener;
    const needsAddress = ip !== null && listener.kind !== 'node-port' && !run.isLocal(ip);
    if (!needsAddress) return this.openListener(spec, listener, run);
    return this.openListener(
      spec,
      listener,
      run,
      () => this.#holdAddress(listener, ip),
      () => this.#releaseAddress(listener),
    );
  }

  async #holdAddress(listener: PortalListener, ip: string): Promise<void> {
    if (listener.holdsAddress) return;
    const count = this.#addressRefs.get(ip) ?? 0;
    if (count === 0) await this.#addresses.ensureAddress(ip);
    this.#addressRefs.set(ip, count + 1);
    listener.holdsAddress = true;
  }

  /** Drops the listener's reference on its address; the last one removes it. Never throws. */
  async #releaseAddress(listener: PortalListener): Promise<void> {
    if (!listener.holdsAddress || listener.ip === null) return;
    listener.holdsAddress = false;
    const ip = listener.ip;
    const count = (this.#addressRefs.get(ip) ?? 1) - 1;
    if (count > 0) {
      this.#addressRefs.set(ip, count);
      return;
    }
    this.#addressRefs.delete(ip);
    try {
      await this.#addresses.removeAddress(ip);
    } catch (error) {
      this.ctx.log.error(`removing the address ${ip} failed`, error);
    }
  }
}
