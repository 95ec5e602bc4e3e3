import { noopLogger } from '@userspace-proxy/core';
import { UserspaceSctpEngine } from '@userspace-proxy/sctp';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { defaultConfiguration } from './config-schema.js';
import { buildDaemonProxier } from './daemon-proxier.js';
import type { ProxySources } from './sources.js';

// A build that throws halfway must close what it already started: the SCTP engine (with the UDP
// helper or raw transport, a child process or a raw socket) and the source's unidler stayed open,
// and an embedder that caught the error and tried again found them still there.
afterEach(() => {
  vi.restoreAllMocks();
});

describe('buildDaemonProxier after a step throws', () => {
  it('closes the SCTP engine, the main proxier and the unidler, then rethrows', async () => {
    const engineClose = vi.spyOn(UserspaceSctpEngine.prototype, 'close');
    const config = defaultConfiguration();
    config.userspaceProxy.idling = true;
    // Validated by the config schema in the daemon; here it makes the Idler's constructor throw
    // after the engine, the main proxier and the unidler exist.
    config.userspaceProxy.idlingMaxHeldPerPort = -1;
    let unidlerClosed = 0;
    const sources = {
      createUnidler: () => ({
        unidle: () => {},
        close: async () => {
          unidlerClosed++;
        },
      }),
    } as unknown as ProxySources;
    await expect(
      buildDaemonProxier(config, {}, { logger: noopLogger, sources }),
    ).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION' });
    expect(engineClose).toHaveBeenCalledTimes(1);
    expect(unidlerClosed).toBe(1);
  });
});
