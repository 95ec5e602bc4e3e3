import { describe, expect, it } from 'vitest';
import { NoopPortalManager } from './portal-manager-noop.js';

describe('NoopPortalManager', () => {
  it('installs nothing and never fails', async () => {
    const portal = {
      service: { namespace: 'ns', name: 's', port: '' },
      protocol: 'TCP' as const,
      kind: 'cluster-ip' as const,
      ip: '10.0.0.1',
      port: 80,
      proxyIP: '0.0.0.0',
      proxyPort: 40000,
    };
    const portals = new NoopPortalManager();
    await expect(portals.open(portal)).resolves.toBeUndefined();
    await expect(portals.close(portal)).resolves.toBeUndefined();
    await expect(portals.cleanupLeftovers()).resolves.toBeUndefined();
  });
});
