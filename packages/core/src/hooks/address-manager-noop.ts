import type { AddressManager } from './address-manager.js';

/**
 * The default {@link AddressManager} of service-port-portal mode: it adds no address, so every
 * Service IP must already be bindable. On Linux every 127.0.0.0/8 address is; other addresses need
 * the `ip addr` manager, root, or a Service IP that is already on an interface.
 */
export class NoopAddressManager implements AddressManager {
  /** Resolves at once: the address is assumed to be bindable already. */
  async ensureAddress(_ip: string): Promise<void> {}
  /** Resolves at once: this manager never added anything. */
  async removeAddress(_ip: string): Promise<void> {}
}
