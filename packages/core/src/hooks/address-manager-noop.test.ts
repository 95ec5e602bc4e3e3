import { describe, expect, it } from 'vitest';
import { NoopAddressManager } from './address-manager-noop.js';

describe('NoopAddressManager', () => {
  it('adds and removes nothing and never fails', async () => {
    const addresses = new NoopAddressManager();
    await expect(addresses.ensureAddress('127.1.0.1')).resolves.toBeUndefined();
    await expect(addresses.removeAddress('127.1.0.1')).resolves.toBeUndefined();
  });
});
