import { noopLogger } from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import type { FromWorker, ToWorker } from './protocol.js';
import { createWorkerSources } from './worker-sources.js';

describe('a worker forwarding NeedPods to the primary', () => {
  it('sends a request that survives the IPC channel: no AbortSignal, which would arrive as {}', () => {
    const sent: FromWorker[] = [];
    const init = {
      type: 'up:init',
      index: 0,
      config: {},
      kinds: { endpointSlices: true, endpoints: false },
      unidler: true,
    } as unknown as Extract<ToWorker, { type: 'up:init' }>;
    const { sources } = createWorkerSources(init, (m) => sent.push(m), noopLogger);
    const service = { metadata: { namespace: 'ns', name: 'web' }, spec: {} };
    const servicePort = { namespace: 'ns', name: 'web', port: 'http' };
    sources.createUnidler?.().needPods({
      service,
      servicePort,
      signal: new AbortController().signal,
    });
    // What the primary gets: the message after the channel's JSON round trip.
    const received = JSON.parse(JSON.stringify(sent)) as FromWorker[];
    expect(received).toEqual([{ type: 'up:need-pods', request: { service, servicePort } }]);
  });
});
