import { describe, it } from 'vitest';
import type { Endpoints } from '../model/model.js';
import { createProxySocketFactory } from '../sockets/proxy-socket-factory.js';
import { udpClient } from '../test-support/net-clients.js';
import {
  loopbackServiceIP,
  service,
  useBackends,
  useProxierHarness,
} from '../test-support/proxier-harness.js';
import { waitFor } from '../test-support/wait-for.js';

const start = useProxierHarness();

function udpEndpoints(port: number): Endpoints {
  return {
    metadata: { namespace: 'ns', name: 'stats' },
    subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'u', port, protocol: 'UDP' }] }],
  };
}

describe('Proxier: UDP sessions follow endpoint changes (kubernetes#19029)', () => {
  const backends = useBackends();

  it('moves a client that never goes quiet off an endpoint that left the Service', async () => {
    const h = await start({ makeProxySocket: createProxySocketFactory() });
    const a = await backends.udp('A:');
    const b = await backends.udp('B:');
    const ip = loopbackServiceIP();
    const first = udpEndpoints(a.port);
    h.proxier.onEndpointsAdd(first);
    await h.synced(() =>
      h.proxier.onServiceAdd(
        service('stats', { clusterIP: ip, ports: [{ name: 'u', port: 8125, protocol: 'UDP' }] }),
      ),
    );
    // One client socket, one source port throughout: the same session unless the proxy ends it.
    const client = await udpClient();
    try {
      const ask = async (text: string) => {
        client.send(Buffer.from(text), 8125, ip);
        return (await client.next(2_000)).data.toString();
      };
      await waitFor(async () => (await ask('x')) === 'A:x', 10_000, 'the reply from A');
      // Endpoint A leaves while it still answers: only the endpoints change can move the client.
      h.proxier.onEndpointsUpdate(first, udpEndpoints(b.port));
      await waitFor(async () => (await ask('y')) === 'B:y', 10_000, 'the reply from B');
    } finally {
      client.close();
    }
  });
});
