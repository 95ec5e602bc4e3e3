import net from 'node:net';
import { describe, expect, it, onTestFinished } from 'vitest';
import { CHANNELS, type RefusedMessage } from '../diagnostics.js';
import type { Service } from '../model/model.js';
import { createProxySocketFactory } from '../sockets/proxy-socket-factory.js';
import { connectTcp, readBytes } from '../test-support/net-clients.js';
import {
  askTcp,
  endpoints,
  freeTcpPort,
  type Harness,
  RecordingConntrack,
  RecordingPortals,
  service,
  untilTcp,
  untilUdp,
  useBackends,
  useProxierHarness,
} from '../test-support/proxier-harness.js';
import { recordChannel } from '../test-support/record-channel.js';
import { waitFor } from '../test-support/wait-for.js';

const start = useProxierHarness();
const P = { namespace: 'ns', name: 'a', port: 'p' };

function redirect(portals = new RecordingPortals(), extra = {}) {
  return { mode: 'redirect' as const, listenIP: '0.0.0.0', portals, ...extra };
}

describe('redirect mode with a recording PortalManager', () => {
  it('opens a portal per Service address and the node port, pointing at the proxy port', async () => {
    const portals = new RecordingPortals();
    const h = await start(redirect(portals));
    const s = service(
      'a',
      { type: 'LoadBalancer', externalIPs: ['192.0.2.1', '192.0.2.2'] },
      {
        status: { loadBalancer: { ingress: [{ ip: '198.51.100.1' }, { hostname: 'lb.example' }] } },
      },
    );
    s.spec.ports = [{ name: 'p', port: 80, protocol: 'TCP', nodePort: 30080 }];
    await h.synced(() => h.proxier.onServiceAdd(s));
    const info = h.proxier.getServiceInfo(P);
    expect(info?.isStarted()).toBe(true);
    expect(info?.portal).toEqual({ ip: '10.0.0.1', port: 80, isExternal: false });
    expect(info?.proxyPort).toBe(40_000);
    expect(info?.loadBalancerIPs).toEqual(['198.51.100.1']);
    expect(info?.serviceRef).toEqual({
      kind: 'Service',
      apiVersion: 'v1',
      namespace: 'ns',
      name: 'a',
      uid: 'uid-a',
    });
    expect(portals.summary()).toEqual([
      'cluster-ip 10.0.0.1:80/TCP',
      'external-ip 192.0.2.1:80/TCP',
      'external-ip 192.0.2.2:80/TCP',
      'load-balancer 198.51.100.1:80/TCP',
      'node-port *:30080/TCP',
    ]);
    for (const p of portals.opened.values()) {
      expect(p).toMatchObject({ proxyIP: '0.0.0.0', proxyPort: 40_000, service: { name: 'a' } });
    }
    // The proxy socket listens on listenIP; the node port has a real listener of its own.
    expect(h.sockets.openOn('0.0.0.0', 0)).toHaveLength(1);
    expect(h.sockets.openOn(null, 30080)).toHaveLength(1);
    expect(h.proxier.getServiceInfo(P, '')?.portal).toEqual({
      ip: '',
      port: 30080,
      isExternal: false,
    });
    expect(h.proxier.serviceInfos()).toEqual([info]);

    await h.synced(() => h.proxier.onServiceDelete(s));
    expect(portals.opened.size).toBe(0);
    expect(h.sockets.open()).toHaveLength(0);
    expect(info?.isFinished()).toBe(true);
  });

  it('sends load-balancer IPs with source ranges to a filtered proxy socket of their own', async () => {
    const portals = new RecordingPortals();
    const h = await start(redirect(portals));
    const s = service(
      'a',
      {
        type: 'LoadBalancer',
        externalIPs: ['192.0.2.1'],
        loadBalancerSourceRanges: ['203.0.113.0/24'],
      },
      { status: { loadBalancer: { ingress: [{ ip: '198.51.100.1' }, { ip: '198.51.100.2' }] } } },
    );
    await h.synced(() => h.proxier.onServiceAdd(s));
    const byAddress = Object.fromEntries(
      [...portals.opened.values()].map((p) => [`${p.kind} ${p.ip}`, p.proxyPort]),
    );
    expect(byAddress).toEqual({
      'cluster-ip 10.0.0.1': 40_000,
      'external-ip 192.0.2.1': 40_000,
      'load-balancer 198.51.100.1': 40_001,
      'load-balancer 198.51.100.2': 40_001,
    });
    const [main, lb] = h.sockets.openOn('0.0.0.0', 0);
    expect(main?.context?.allowedSources).toBeUndefined();
    expect(lb?.context?.allowedSources).toEqual(['203.0.113.0/24']);
    const lbInfo = h.proxier.getServiceInfo(P, '198.51.100.2');
    expect(lbInfo?.proxyPort).toBe(40_001);
    expect(lbInfo?.portal).toEqual({ ip: '198.51.100.1', port: 80, isExternal: false });
    expect(lbInfo?.isStarted()).toBe(true);
    expect(h.proxier.getServiceInfo(P)?.proxyPort).toBe(40_000);
    expect(h.proxier.serviceInfos()).toHaveLength(2);

    // Without source ranges, one socket again.
    await h.synced(() =>
      h.proxier.onServiceUpdate(s, { ...s, spec: { ...s.spec, loadBalancerSourceRanges: [] } }),
    );
    expect(h.sockets.open()).toHaveLength(1);
    expect(new Set([...portals.opened.values()].map((p) => p.proxyPort)).size).toBe(1);
    await h.synced(() => h.proxier.onServiceDelete(s));
    expect(h.sockets.open()).toHaveLength(0);
    expect(portals.opened.size).toBe(0);
  });

  it('does not re-examine unchanged Services on a sync (no ensurePortals sweep)', async () => {
    const portals = new RecordingPortals();
    const h = await start(redirect(portals));
    await h.synced(() => {
      for (let i = 1; i <= 50; i++)
        h.proxier.onServiceAdd(service(`s${i}`, { clusterIP: `10.0.3.${i}` }));
    });
    expect(portals.log).toHaveLength(50);
    await h.synced(() => h.proxier.onServiceAdd(service('new', { clusterIP: '10.0.4.1' })));
    await h.synced(() => h.proxier.sync());
    expect(portals.log.slice(50)).toEqual(['open cluster-ip 10.0.4.1:80/TCP -> 0.0.0.0:40050']);
  });

  it('re-creates on an external IP change, closing only what went away', async () => {
    const portals = new RecordingPortals();
    const h = await start(redirect(portals));
    const before = service('a', { externalIPs: ['192.0.2.1'] });
    const after = service('a', { externalIPs: ['192.0.2.2'] });
    await h.synced(() => h.proxier.onServiceAdd(before));
    const old = h.proxier.getServiceInfo(P);
    await h.synced(() => h.proxier.onServiceUpdate(before, after));
    expect(old?.isFinished()).toBe(true);
    expect(h.proxier.getServiceInfo(P)?.externalIPs).toEqual(['192.0.2.2']);
    expect(portals.summary()).toEqual([
      'cluster-ip 10.0.0.1:80/TCP',
      'external-ip 192.0.2.2:80/TCP',
    ]);
  });

  it('still stops the old proxy when closing a portal fails (reference quirk 3)', async () => {
    const portals = new RecordingPortals();
    const h = await start(redirect(portals));
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    const old = h.proxier.getServiceInfo(P);
    portals.failClose = true;
    await h.synced(() =>
      h.proxier.onServiceUpdate(service('a'), service('a', { clusterIP: '10.0.0.2' })),
    );
    expect(old?.isFinished()).toBe(true);
    expect(h.sockets.open()).toHaveLength(1);
    expect(h.proxier.getServiceInfo(P)?.portal.ip).toBe('10.0.0.2');
  });

  it('claims a local Service IP with a listener and gates its rule on the claim', async () => {
    const portals = new RecordingPortals();
    const h = await start(redirect(portals));
    await h.synced(() => h.proxier.onServiceAdd(service('a', { externalIPs: ['10.99.0.1'] })));
    expect(h.sockets.openOn('10.99.0.1', 80)).toHaveLength(1);
    await h.synced(() =>
      h.proxier.onServiceAdd(service('b', { clusterIP: '10.0.0.2', externalIPs: ['10.99.0.1'] })),
    );
    expect(h.events.map((e) => [e.ref.name, e.reason])).toEqual([['b', 'PortConflict']]);
    expect(portals.summary()).toEqual([
      'cluster-ip 10.0.0.1:80/TCP',
      'cluster-ip 10.0.0.2:80/TCP',
      'external-ip 10.99.0.1:80/TCP',
    ]);
    expect([...portals.opened.values()].filter((p) => p.ip === '10.99.0.1')[0]?.service.name).toBe(
      'a',
    );
  });
});

describe('redirect mode: node ports', () => {
  function withNodePort(name: string, nodePort: number, clusterIP: string): Service {
    return service(name, {
      type: 'NodePort',
      clusterIP,
      ports: [{ name: 'p', port: 80, protocol: 'TCP', nodePort }],
    });
  }

  it('claims node ports on the node-port addresses only', async () => {
    const h = await start(redirect(new RecordingPortals(), { nodePortAddresses: ['10.0.0.0/8'] }));
    await h.synced(() => h.proxier.onServiceAdd(withNodePort('a', 30080, '10.0.0.1')));
    expect(h.sockets.openOn('10.99.0.1', 30080)).toHaveLength(1);
    expect(h.sockets.openOn(null, 30080)).toHaveLength(0);
  });

  it('gives a conflicting node port to the second Service once the first is deleted', async () => {
    const portals = new RecordingPortals();
    const h = await start(redirect(portals));
    await h.synced(() => h.proxier.onServiceAdd(withNodePort('a', 30080, '10.0.0.1')));
    await h.synced(() => h.proxier.onServiceAdd(withNodePort('b', 30080, '10.0.0.2')));
    expect(h.events).toHaveLength(1);
    expect(h.events[0]).toMatchObject({
      ref: { kind: 'Service', name: 'b' },
      type: 'Warning',
      reason: 'PortConflict',
    });
    expect(h.events[0]?.message).toContain('*:30080/TCP');
    // b serves its cluster IP; only the node port is withheld, and its rule is not installed.
    expect(h.proxier.getServiceInfo({ ...P, name: 'b' })?.isStarted()).toBe(true);
    const nodePortOwner = () =>
      [...portals.opened.values()].find((p) => p.kind === 'node-port')?.service.name;
    expect(nodePortOwner()).toBe('a');
    // A sync that does not concern them changes nothing and records no new event.
    await h.synced(() => h.proxier.sync());
    expect(h.events).toHaveLength(1);

    await h.synced(() => h.proxier.onServiceDelete(withNodePort('a', 30080, '10.0.0.1')));
    expect(nodePortOwner()).toBe('b');
    expect(h.sockets.openOn(null, 30080)).toHaveLength(1);
    expect(h.events).toHaveLength(1);
  });

  it('hands a node port over within one sync without an event', async () => {
    const h = await start(redirect());
    await h.synced(() => h.proxier.onServiceAdd(withNodePort('a', 30080, '10.0.0.1')));
    await h.synced(() => {
      h.proxier.onServiceAdd(withNodePort('b', 30080, '10.0.0.2'));
      h.proxier.onServiceDelete(withNodePort('a', 30080, '10.0.0.1'));
    });
    expect(h.events).toEqual([]);
    expect(h.proxier.getServiceInfo({ ...P, name: 'b' }, '')?.portal.port).toBe(30080);
  });
});

describe('redirect mode: proxy ports', () => {
  it('releases the allocated port when the socket cannot open (reference quirk 2)', async () => {
    const h = await start(redirect(new RecordingPortals(), { portRange: '41000-41000' }));
    h.sockets.fail = () => true;
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    expect(h.events.map((e) => e.reason)).toEqual(['SocketOpenFailed']);
    expect(h.proxier.getServiceInfo(P)).toBeUndefined();
    h.sockets.fail = () => false;
    await h.synced(() => h.proxier.sync()); // failed ports are retried
    expect(h.proxier.getServiceInfo(P)?.proxyPort).toBe(41_000);
    expect(h.events.map((e) => e.reason)).toEqual(['SocketOpenFailed']);
  });

  it('records an exhausted range and serves the waiting Service once a port is free', async () => {
    const h = await start(redirect(new RecordingPortals(), { portRange: '41000-41000' }));
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    await h.synced(() => h.proxier.onServiceAdd(service('b', { clusterIP: '10.0.0.2' })));
    expect(h.events.map((e) => [e.ref.name, e.reason])).toEqual([['b', 'PortAllocationFailed']]);
    await h.synced(() => h.proxier.onServiceDelete(service('a')));
    expect(h.proxier.getServiceInfo({ ...P, name: 'b' })?.proxyPort).toBe(41_000);
  });
});

describe('conntrack on UDP removal', () => {
  const udp = (clusterIP: string, protocol: 'UDP' | 'TCP' = 'UDP') =>
    service(
      'a',
      { clusterIP, externalIPs: ['192.0.2.1'], ports: [{ name: 'p', port: 53, protocol }] },
      { status: { loadBalancer: { ingress: [{ ip: '198.51.100.1' }] } } },
    );

  it('clears the cluster, external and load-balancer IPs of a removed UDP port', async () => {
    const conntrack = new RecordingConntrack();
    const h = await start(redirect(new RecordingPortals(), { conntrack }));
    await h.synced(() => h.proxier.onServiceAdd(udp('10.0.0.1')));
    expect(conntrack.cleared).toEqual([]);
    await h.synced(() => h.proxier.onServiceDelete(udp('10.0.0.1')));
    expect(conntrack.cleared.sort()).toEqual(['10.0.0.1/UDP', '192.0.2.1/UDP', '198.51.100.1/UDP']);
  });

  it('clears the old IPs when a UDP port changes, tolerates failures, and ignores TCP', async () => {
    const conntrack = new RecordingConntrack();
    const h = await start(redirect(new RecordingPortals(), { conntrack }));
    await h.synced(() => h.proxier.onServiceAdd(udp('10.0.0.99')));
    await h.synced(() => h.proxier.onServiceUpdate(udp('10.0.0.99'), udp('10.0.0.2')));
    expect(conntrack.cleared).toContain('10.0.0.99/UDP');
    expect(h.proxier.getServiceInfo(P)?.portal.ip).toBe('10.0.0.2');
    conntrack.cleared.length = 0;
    await h.synced(() => h.proxier.onServiceUpdate(udp('10.0.0.2'), udp('10.0.0.2', 'TCP')));
    expect(conntrack.cleared).toContain('10.0.0.2/UDP');
    conntrack.cleared.length = 0;
    await h.synced(() => h.proxier.onServiceDelete(udp('10.0.0.2', 'TCP')));
    expect(conntrack.cleared).toEqual([]);
  });
});

describe('shutdown', () => {
  it('closes every socket and portal, releases ports, and is idempotent', async () => {
    const portals = new RecordingPortals();
    const h = await start(redirect(portals, { portRange: '41000-41001' }));
    const s = service('a', {
      type: 'NodePort',
      ports: [{ name: 'p', port: 80, protocol: 'TCP', nodePort: 30080 }],
    });
    await h.synced(() => {
      h.proxier.onServiceAdd(s);
      h.proxier.onServiceAdd(service('b', { clusterIP: '10.0.0.2' }));
    });
    expect(h.sockets.open()).toHaveLength(3);
    const infos = h.proxier.serviceInfos();
    await Promise.all([h.proxier.shutdown(), h.proxier.shutdown()]);
    await h.proxier.shutdown();
    expect(h.sockets.open()).toHaveLength(0);
    expect(portals.opened.size).toBe(0);
    expect(infos.every((i) => i.isFinished())).toBe(true);
    expect(h.proxier.serviceInfos()).toEqual([]);
    // Nothing is opened after shutdown.
    h.proxier.onServiceAdd(service('c', { clusterIP: '10.0.0.3' }));
    h.proxier.sync();
    // The change is not even recorded, so no sync can ever open it.
    expect(h.proxier.pendingChanges()).toBe(0);
    expect(h.sockets.open()).toHaveLength(0);
  });
});

describe('redirect mode with real sockets on loopback', () => {
  const { tcp: tcpBackend, udp: udpBackend } = useBackends();
  const real = (extra = {}) =>
    start({
      mode: 'redirect',
      listenIP: '127.0.0.1',
      makeProxySocket: createProxySocketFactory(),
      nodePortAddresses: ['127.0.0.0/8'],
      ...extra,
    });
  const proxyPort = (h: Harness, port = 'p', name = 'a') =>
    h.proxier.getServiceInfo({ namespace: 'ns', name, port })?.proxyPort ?? 0;

  it('proxies TCP and UDP of a multi-port Service through its proxy ports', async () => {
    const h = await real();
    const tcp = await tcpBackend();
    const udp = await udpBackend('u:');
    const s = service('a', {
      ports: [
        { name: 'p', port: 80, protocol: 'TCP' },
        { name: 'dns', port: 53, protocol: 'UDP' },
      ],
    });
    await h.synced(() => {
      h.proxier.onEndpointsAdd({
        metadata: { namespace: 'ns', name: 'a' },
        subsets: [
          {
            addresses: [{ ip: '127.0.0.1' }],
            ports: [
              { name: 'p', port: tcp.port },
              { name: 'dns', port: udp.port, protocol: 'UDP' },
            ],
          },
        ],
      });
      h.proxier.onServiceAdd(s);
    });
    await untilTcp('127.0.0.1', proxyPort(h), 'hello', 'hello');
    await untilUdp('127.0.0.1', proxyPort(h, 'dns'), 'u:ping');
  });

  it("closes clients outside the source ranges at the load-balancer IPs' socket, counted", async () => {
    const refused = recordChannel<RefusedMessage>(CHANNELS.refused, onTestFinished);
    const portals = new RecordingPortals();
    const h = await real({ listenIP: '127.0.0.2', portals });
    const echo = await tcpBackend('hello');
    h.proxier.onEndpointsAdd(endpoints('a', ['127.0.0.1'], echo.port));
    await h.synced(() =>
      h.proxier.onServiceAdd(
        service(
          'a',
          { type: 'LoadBalancer', loadBalancerSourceRanges: ['127.0.0.1/32'] },
          { status: { loadBalancer: { ingress: [{ ip: '198.51.100.9' }] } } },
        ),
      ),
    );
    const lbPort = [...portals.opened.values()].find((p) => p.kind === 'load-balancer')?.proxyPort;
    expect(lbPort).toBeDefined();
    expect(lbPort).not.toBe(proxyPort(h));
    const ask = (port: number, from: string) =>
      new Promise<string>((resolve) => {
        const c = net.connect({ host: '127.0.0.2', port, localAddress: from });
        let got = '';
        c.on('connect', () => c.end('x'));
        c.on('data', (chunk) => {
          got += chunk.toString();
        });
        c.on('error', () => resolve(`${got}|error`));
        c.on('close', () => resolve(got));
      });
    expect(await ask(lbPort as number, '127.0.0.1')).toBe('hello');
    expect(await ask(lbPort as number, '127.0.0.3')).not.toContain('hello');
    // The cluster IP's socket admits everyone.
    expect(await ask(proxyPort(h), '127.0.0.3')).toBe('hello');
    await waitFor(() => refused.some((m) => m.reason === 'source-range'), 5_000, 'a refusal');
    expect(refused.filter((m) => m.reason === 'source-range')).toHaveLength(1);
  });

  it('points every portal at the proxy socket clients can reach', async () => {
    const portals = new RecordingPortals();
    const h = await real({ listenIP: '127.0.0.2', portals });
    const echo = await tcpBackend();
    h.proxier.onEndpointsAdd(endpoints('a', ['127.0.0.1'], echo.port));
    await h.synced(() => h.proxier.onServiceAdd(service('a', { externalIPs: ['192.0.2.7'] })));
    expect(portals.opened.size).toBe(2);
    for (const portal of portals.opened.values()) {
      expect(portal.proxyIP).toBe('127.0.0.2');
      await untilTcp(portal.proxyIP, portal.proxyPort, `via ${portal.kind}`, `via ${portal.kind}`);
    }
  });

  it('serves a Service whose endpoints come later, or came first, and through EndpointSlices', async () => {
    const h = await real();
    const one = await tcpBackend('one');
    const two = await tcpBackend('two');
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    // No endpoints yet: the connection is accepted and closed without a byte.
    expect(await askTcp('127.0.0.1', proxyPort(h))).not.toBe('one');
    h.proxier.onEndpointsAdd(endpoints('a', ['127.0.0.1'], one.port));
    await untilTcp('127.0.0.1', proxyPort(h), 'one');

    h.proxier.onEndpointSliceAdd({
      metadata: { namespace: 'ns', name: 'b-x', labels: { 'kubernetes.io/service-name': 'b' } },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['127.0.0.1'] }],
      ports: [{ name: 'p', port: two.port }],
    });
    await h.synced(() => h.proxier.onServiceAdd(service('b', { clusterIP: '10.0.0.2' })));
    await untilTcp('127.0.0.1', proxyPort(h, 'p', 'b'), 'two');
  });

  it('serves node ports for real, and hands a conflicting one over when its owner goes', async () => {
    const h = await real();
    const one = await tcpBackend('one');
    const two = await tcpBackend('two');
    const nodePort = await freeTcpPort();
    const withNodePort = (name: string, clusterIP: string) =>
      service(name, {
        type: 'NodePort',
        clusterIP,
        ports: [{ name: 'p', port: 80, protocol: 'TCP', nodePort }],
      });
    h.proxier.onEndpointsAdd(endpoints('a', ['127.0.0.1'], one.port));
    h.proxier.onEndpointsAdd(endpoints('b', ['127.0.0.1'], two.port));
    await h.synced(() => h.proxier.onServiceAdd(withNodePort('a', '10.0.0.1')));
    await untilTcp('127.0.0.1', nodePort, 'one');
    await h.synced(() => h.proxier.onServiceAdd(withNodePort('b', '10.0.0.2')));
    expect(h.events.map((e) => [e.ref.name, e.reason])).toEqual([['b', 'PortConflict']]);
    expect(await askTcp('127.0.0.1', nodePort)).toBe('one');
    await untilTcp('127.0.0.1', proxyPort(h, 'p', 'b'), 'two');
    await h.synced(() => h.proxier.onServiceDelete(withNodePort('a', '10.0.0.1')));
    await untilTcp('127.0.0.1', nodePort, 'two');
  });

  it('stops on delete, serves again on re-add, and lets connections outlive shutdown', async () => {
    const h = await real({ portRange: '' });
    const echo = await tcpBackend();
    h.proxier.onEndpointsAdd(endpoints('a', ['127.0.0.1'], echo.port));
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    const first = proxyPort(h);
    await untilTcp('127.0.0.1', first, 'x', 'x');
    await h.synced(() => h.proxier.onServiceDelete(service('a')));
    expect(await askTcp('127.0.0.1', first)).toBe('ECONNREFUSED');
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    await untilTcp('127.0.0.1', proxyPort(h), 'y', 'y');

    const client = await connectTcp(proxyPort(h));
    client.write('before');
    expect((await readBytes(client, 6)).toString()).toBe('before');
    await h.proxier.shutdown();
    expect(await askTcp('127.0.0.1', proxyPort(h))).toBe('ECONNREFUSED');
    client.write('after');
    expect((await readBytes(client, 5)).toString()).toBe('after');
    client.destroy();
  });
});
