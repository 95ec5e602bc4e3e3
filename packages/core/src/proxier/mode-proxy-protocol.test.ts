import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { Service } from '../model/model.js';
import { PROXY_PROTOCOL_ANNOTATION } from '../model/proxy-protocol-annotation.js';
import { createProxySocketFactory } from '../sockets/proxy-socket-factory.js';
import { readBytes } from '../test-support/net-clients.js';
import {
  endpoints,
  loopbackServiceIP,
  published,
  RecordingPortals,
  service,
  useProxierHarness,
} from '../test-support/proxier-harness.js';
import {
  type ParsedProxyHeader,
  type ProxyProtocolServer,
  startProxyProtocolServer,
} from '../test-support/proxy-protocol-server.js';
import { waitFor } from '../test-support/wait-for.js';

/** Both modes, through the Proxier: the annotation reaches the sockets, and each writes the header. */
const start = useProxierHarness();
const servers: ProxyProtocolServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
});

function annotate(s: Service, version: string): Service {
  return {
    ...s,
    metadata: { ...s.metadata, annotations: { [PROXY_PROTOCOL_ANNOTATION]: version } },
  };
}

async function ask(
  host: string,
  port: number,
  text: string,
): Promise<{ reply: string; local: number; from: string }> {
  const c = net.connect({ host, port });
  c.on('error', () => {});
  await new Promise((resolve) => c.once('connect', resolve));
  c.write(text);
  const reply = (await readBytes(c, text.length)).toString();
  const local = c.localPort ?? 0;
  const from = c.localAddress ?? '';
  c.destroy();
  return { reply, local, from };
}

describe('the PROXY protocol through the Proxier', () => {
  it('portal mode: the cluster IP listener writes the cluster IP as destination', async () => {
    const backend = await startProxyProtocolServer();
    servers.push(backend);
    const clusterIP = loopbackServiceIP();
    const h = await start({ nodePortAddresses: [], makeProxySocket: createProxySocketFactory() });
    const svc = annotate(service('pp', { clusterIP, ports: [{ name: 'p', port: 8080 }] }), 'v2');
    await h.synced(() => {
      h.proxier.onServiceAdd(svc);
      h.proxier.onEndpointsAdd(endpoints('pp', [backend.host], backend.port));
    });
    const { reply, local } = await ask(clusterIP, 8080, 'hello');
    expect(reply).toBe('hello');
    const header = backend.headers[0] as ParsedProxyHeader;
    expect(header).toMatchObject({ version: 2, family: 'TCP4', command: 'PROXY' });
    expect(header.src?.port).toBe(local);
    expect(header.dst).toEqual({ address: clusterIP, port: 8080 });

    // Turning it off re-creates the socket: the next connection has no header.
    await h.synced(() =>
      h.proxier.onServiceUpdate(
        svc,
        service('pp', { clusterIP, ports: [{ name: 'p', port: 8080 }] }),
      ),
    );
    const c = net.connect({ host: clusterIP, port: 8080 });
    c.on('error', () => {});
    c.write('PLAIN');
    await waitFor(() => backend.headers.length === 2, 5_000, 'the second connection');
    c.destroy();
    expect(backend.headers[1]).toBeInstanceOf(Error);
  });

  it('redirect mode: the proxy port writes the portal (cluster IP and Service port)', async () => {
    const backend = await startProxyProtocolServer();
    servers.push(backend);
    const h = await start({
      mode: 'redirect',
      listenIP: '127.0.0.2',
      portals: new RecordingPortals(),
      makeProxySocket: createProxySocketFactory(),
      nodePortAddresses: [],
    });
    const svc = annotate(service('pp', { clusterIP: '10.96.0.10' }), 'v1');
    await h.synced(() => {
      h.proxier.onServiceAdd(svc);
      h.proxier.onEndpointsAdd(endpoints('pp', [backend.host], backend.port));
    });
    const proxyPort = h.proxier.getServiceInfo({
      namespace: 'ns',
      name: 'pp',
      port: 'p',
    })?.proxyPort;
    const { reply, local, from } = await ask('127.0.0.2', proxyPort ?? 0, 'hi');
    expect(reply).toBe('hi');
    expect((backend.headers[0] as ParsedProxyHeader).raw.toString()).toBe(
      `PROXY TCP4 ${from} 10.96.0.10 ${local} 80\r\n`,
    );
  });

  it('rejects a bad value with the field path, counted, and serves nothing new for it', async () => {
    const h = await start();
    h.proxier.onServiceAdd(annotate(service('bad'), 'v3'));
    expect(h.proxier.pendingChanges()).toBe(0);
    expect(h.sockets.open()).toHaveLength(0);
    expect(published.rejected.map((m) => m.reason)).toEqual([
      'metadata.annotations["userspace-proxy.io/proxy-protocol"]: must be one of v1, v2, got "v3"',
    ]);
  });
});
