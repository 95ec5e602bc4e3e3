/**
 * Adds Service addresses to a host interface in ServicePortPortal mode, so that a listener can bind
 * them (Windows used netsh for this). The default does nothing: the addresses must already be local,
 * as every 127.0.0.0/8 address is on Linux.
 */
export interface AddressManager {
  /** Makes `ip` bindable; idempotent. */
  ensureAddress(ip: string): Promise<void>;
  /** Removes an address this manager added; an address it did not add is left alone. */
  removeAddress(ip: string): Promise<void>;
}
