import { describe, expect, it, vi } from 'vitest';
import type { AddressManager } from '../hooks/address-manager.js';
import { RoundRobinLoadBalancer } from '../load-balancing/load-balancer-round-robin.js';
import type { Service } from '../model/model.js';
import { createProxySocketFactory } from '../sockets/proxy-socket-factory.js';
import { connectTcp, readBytes } from '../test-support/net-clients.js';
import {
  askTcp,
  endpoints,
  freeTcpPort,
  loopbackServiceIP,
  service,
  untilTcp,
  untilUdp,
  useBackends,
  useProxierHarness,
} from '../test-support/proxier-harness.js';

const start = useProxierHarness();
const P = { namespace: 'ns', name: 'a', port: 'p' };

class RecordingAddresses implements AddressManager {
  readonly log: string[] = [];
  failing = new Set<string>();
  async ensureAddress(ip: string): Promise<void> {
    this.log.push(`ensure ${ip}`);
    if (this.failing.has(ip)) throw new Error(`cannot add ${ip}`);
  }
  async removeAddress(ip: string): Promise<void> {
    this.log.push(`remove ${ip}`);
  }
}

/** 10.99.0.1 is local on the fake host; 192.0.2.x and 198.51.100.x are not. */
function full(name = 'a', clusterIP = '10.0.0.1'): Service {
  return service(
    name,
    {
      type: 'LoadBalancer',
      clusterIP,
      externalIPs: ['192.0.2.1', '10.99.0.1'],
      ports: [{ name: 'p', port: 80, protocol: 'TCP', nodePort: 30080 }],
    },
    { status: { loadBalancer: { ingress: [{ ip: '198.51.100.1' }, { hostname: 'lb.example' }] } } },
  );
}

describe('service-port-portal mode (fake sockets)', () => {
  it('opens one listener per address, all sharing one load-balancer entry', async () => {
    const lb = new RoundRobinLoadBalancer();
    const newService = vi.spyOn(lb, 'newService');
    const h = await start({ loadBalancer: lb, nodePortAddresses: ['10.0.0.0/8', '127.0.0.0/8'] });
    await h.synced(() => h.proxier.onServiceAdd(full()));
    const bound = h.sockets
      .open()
      .map((s) => `${s.ip}:${s.requested}`)
      .sort();
    // The hostname-only ingress adds nothing (the reference mapped it to every address).
    expect(bound).toEqual([
      '10.0.0.1:80',
      '10.99.0.1:30080',
      '10.99.0.1:80',
      '127.0.0.1:30080',
      '192.0.2.1:80',
      '198.51.100.1:80',
    ]);
    expect(newService).toHaveBeenCalledTimes(1);
    const infos = h.proxier.serviceInfos();
    expect(infos).toHaveLength(6);
    expect(infos.every((i) => i.isStarted())).toBe(true);
    expect(h.proxier.getServiceInfo(P)?.portal).toEqual({
      ip: '10.0.0.1',
      port: 80,
      isExternal: false,
    });
    expect(h.proxier.getServiceInfo(P, '192.0.2.1')?.portal).toEqual({
      ip: '192.0.2.1',
      port: 80,
      isExternal: true,
    });
    expect(h.proxier.getServiceInfo(P, '10.99.0.1')?.portal.port).toBe(80);
    expect(h.proxier.getServiceInfo(P, '127.0.0.1')?.portal.port).toBe(30080);
    expect(h.proxier.getServiceInfo(P, '203.0.113.9')).toBeUndefined();
  });

  it('binds a node port on every address with "all"', async () => {
    const h = await start({ nodePortAddresses: ['all'] });
    await h.synced(() => h.proxier.onServiceAdd(full()));
    expect(h.sockets.openOn(null, 30080)).toHaveLength(1);
    expect(h.proxier.getServiceInfo(P, '')?.portal).toEqual({
      ip: '',
      port: 30080,
      isExternal: false,
    });
  });

  it('ensures non-local addresses before binding and removes them after the last listener', async () => {
    const addresses = new RecordingAddresses();
    const h = await start({ addresses });
    const shared = (name: string, clusterIP: string, port: number) =>
      service(name, {
        clusterIP,
        externalIPs: ['192.0.2.1'],
        ports: [{ name: 'p', port, protocol: 'TCP' }],
      });
    await h.synced(() => {
      h.proxier.onServiceAdd(shared('a', '10.0.0.1', 80));
      h.proxier.onServiceAdd(shared('b', '10.99.0.1', 81));
    });
    // 10.99.0.1 is already local; 192.0.2.1 is ensured once although two listeners use it.
    expect(addresses.log).toEqual(['ensure 10.0.0.1', 'ensure 192.0.2.1']);
    await h.synced(() => h.proxier.onServiceDelete(shared('a', '10.0.0.1', 80)));
    expect(addresses.log.slice(2)).toEqual(['remove 10.0.0.1']);
    await h.synced(() => h.proxier.onServiceDelete(shared('b', '10.99.0.1', 81)));
    expect(addresses.log.slice(3)).toEqual(['remove 192.0.2.1']);
  });

  it('records PortalFailed when an address cannot be added and serves the rest', async () => {
    const addresses = new RecordingAddresses();
    addresses.failing.add('192.0.2.1');
    const h = await start({ addresses });
    await h.synced(() => h.proxier.onServiceAdd(service('a', { externalIPs: ['192.0.2.1'] })));
    expect(h.events.map((e) => e.reason)).toEqual(['PortalFailed']);
    expect(h.proxier.getServiceInfo(P)?.isStarted()).toBe(true);
    expect(h.sockets.openOn('192.0.2.1')).toHaveLength(0);
    addresses.failing.clear();
    await h.synced(() => h.proxier.sync());
    expect(h.sockets.openOn('192.0.2.1', 80)).toHaveLength(1);
  });

  it('gives an address taken by another Service to it once the owner is deleted', async () => {
    const h = await start();
    const a = service('a', { externalIPs: ['192.0.2.1'] });
    const b = service('b', { clusterIP: '10.0.0.2', externalIPs: ['192.0.2.1'] });
    await h.synced(() => h.proxier.onServiceAdd(a));
    await h.synced(() => h.proxier.onServiceAdd(b));
    expect(h.events.map((e) => [e.ref.name, e.reason])).toEqual([['b', 'PortConflict']]);
    expect(h.events[0]?.message).toContain('192.0.2.1:80/TCP');
    expect(h.proxier.getServiceInfo({ ...P, name: 'b' }, '10.0.0.2')?.isStarted()).toBe(true);
    expect(h.proxier.getServiceInfo({ ...P, name: 'b' }, '192.0.2.1')).toBeUndefined();
    expect(h.proxier.getServiceInfo(P, '192.0.2.1')?.isStarted()).toBe(true);
    await h.synced(() => h.proxier.onServiceDelete(a));
    expect(h.proxier.getServiceInfo({ ...P, name: 'b' }, '192.0.2.1')?.isStarted()).toBe(true);
    expect(h.events).toHaveLength(1);
  });

  it('retries a listener that could not bind on a later sync', async () => {
    const h = await start();
    h.sockets.fail = (_protocol, ip) => ip === '10.0.0.1';
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    expect(h.events.map((e) => e.reason)).toEqual(['SocketOpenFailed']);
    h.sockets.fail = () => false;
    await h.synced(() => h.proxier.sync());
    expect(h.proxier.getServiceInfo(P)?.isStarted()).toBe(true);
  });

  it('re-creates only the changed Service port of a multi-port Service', async () => {
    const h = await start();
    const two = (dnsPort: number) =>
      service('a', {
        ports: [
          { name: 'p', port: 80, protocol: 'TCP' },
          { name: 'dns', port: dnsPort, protocol: 'UDP' },
        ],
      });
    await h.synced(() => h.proxier.onServiceAdd(two(53)));
    const web = h.proxier.getServiceInfo(P);
    const dns = h.proxier.getServiceInfo({ ...P, port: 'dns' });
    expect(dns?.protocol).toBe('UDP');
    await h.synced(() => h.proxier.onServiceUpdate(two(53), two(5353)));
    expect(h.proxier.getServiceInfo(P)).toBe(web);
    expect(dns?.isFinished()).toBe(true);
    expect(h.proxier.getServiceInfo({ ...P, port: 'dns' })?.portal.port).toBe(5353);
  });
});

describe('service-port-portal mode with real sockets on 127.x addresses', () => {
  const backends = useBackends();
  const named = (name: string) => backends.tcp(name);
  const real = () =>
    start({ makeProxySocket: createProxySocketFactory(), nodePortAddresses: ['127.0.0.0/8'] });

  it('serves TCP and UDP on the cluster IP, an external IP and the node port', async () => {
    const h = await real();
    const tcp = await backends.tcp();
    const udp = await backends.udp('u:');
    const clusterIP = loopbackServiceIP();
    const externalIP = loopbackServiceIP();
    const nodePort = await freeTcpPort();
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
    await h.synced(() =>
      h.proxier.onServiceAdd(
        service('a', {
          type: 'NodePort',
          clusterIP,
          externalIPs: [externalIP],
          ports: [
            { name: 'p', port: 8080, protocol: 'TCP', nodePort },
            { name: 'dns', port: 5353, protocol: 'UDP' },
          ],
        }),
      ),
    );
    await untilTcp(clusterIP, 8080, 'c', 'c');
    await untilTcp(externalIP, 8080, 'e', 'e');
    await untilTcp('127.0.0.1', nodePort, 'n', 'n');
    await untilUdp(clusterIP, 5353, 'u:ping');
    await untilUdp(externalIP, 5353, 'u:ping');
  });

  it('follows port, external IP and cluster IP changes, and delete and re-add', async () => {
    const h = await real();
    const web = await named('web');
    const clusterIP = loopbackServiceIP();
    const ext1 = loopbackServiceIP();
    const ext2 = loopbackServiceIP();
    const at = (port: number, externalIPs: string[], ip = clusterIP) =>
      service('a', { clusterIP: ip, externalIPs, ports: [{ name: 'p', port, protocol: 'TCP' }] });
    h.proxier.onEndpointsAdd(endpoints('a', ['127.0.0.1'], web.port));
    await h.synced(() => h.proxier.onServiceAdd(at(8080, [ext1])));
    await untilTcp(clusterIP, 8080, 'web');
    await untilTcp(ext1, 8080, 'web');

    await h.synced(() => h.proxier.onServiceUpdate(at(8080, [ext1]), at(8081, [ext1])));
    await untilTcp(clusterIP, 8081, 'web');
    expect(await askTcp(clusterIP, 8080)).toBe('ECONNREFUSED');

    await h.synced(() => h.proxier.onServiceUpdate(at(8081, [ext1]), at(8081, [ext2])));
    await untilTcp(ext2, 8081, 'web');
    expect(await askTcp(ext1, 8081)).toBe('ECONNREFUSED');

    // ClusterIP removed (headless) and restored.
    await h.synced(() => h.proxier.onServiceUpdate(at(8081, [ext2]), at(8081, [ext2], 'None')));
    expect(await askTcp(clusterIP, 8081)).toBe('ECONNREFUSED');
    await h.synced(() => h.proxier.onServiceUpdate(at(8081, [ext2], 'None'), at(8081, [ext2])));
    await untilTcp(clusterIP, 8081, 'web');

    await h.synced(() => h.proxier.onServiceDelete(at(8081, [ext2])));
    expect(await askTcp(clusterIP, 8081)).toBe('ECONNREFUSED');
    await h.synced(() => h.proxier.onServiceAdd(at(8081, [ext2])));
    await untilTcp(clusterIP, 8081, 'web');
  });

  it('keeps serving the first owner of a node port and hands it to the second later', async () => {
    const h = await real();
    const one = await named('one');
    const two = await named('two');
    const nodePort = await freeTcpPort();
    const ipA = loopbackServiceIP();
    const ipB = loopbackServiceIP();
    const withNodePort = (name: string, clusterIP: string) =>
      service(name, {
        type: 'NodePort',
        clusterIP,
        ports: [{ name: 'p', port: 8080, protocol: 'TCP', nodePort }],
      });
    h.proxier.onEndpointsAdd(endpoints('a', ['127.0.0.1'], one.port));
    h.proxier.onEndpointsAdd(endpoints('b', ['127.0.0.1'], two.port));
    await h.synced(() => h.proxier.onServiceAdd(withNodePort('a', ipA)));
    await h.synced(() => h.proxier.onServiceAdd(withNodePort('b', ipB)));
    expect(h.events.map((e) => [e.ref.name, e.reason])).toEqual([['b', 'PortConflict']]);
    await untilTcp(ipB, 8080, 'two');
    expect(await askTcp('127.0.0.1', nodePort)).toBe('one');
    await h.synced(() => h.proxier.onServiceDelete(withNodePort('a', ipA)));
    await untilTcp('127.0.0.1', nodePort, 'two');
  });

  it('never touches an established connection when the endpoints change or go', async () => {
    const h = await real();
    const first = await backends.tcp(); // echoes
    const second = await named('second');
    const ip = loopbackServiceIP();
    h.proxier.onEndpointsAdd(endpoints('a', ['127.0.0.1'], first.port));
    await h.synced(() =>
      h.proxier.onServiceAdd(
        service('a', { clusterIP: ip, ports: [{ name: 'p', port: 8080, protocol: 'TCP' }] }),
      ),
    );
    const client = await connectTcp(8080, ip);
    client.write('one');
    expect((await readBytes(client, 3)).toString()).toBe('one');
    // New clients go to the new endpoint at once; the old connection keeps its endpoint.
    h.proxier.onEndpointsUpdate(
      endpoints('a', ['127.0.0.1'], first.port),
      endpoints('a', ['127.0.0.1'], second.port),
    );
    await untilTcp(ip, 8080, 'second');
    client.write('two');
    expect((await readBytes(client, 3)).toString()).toBe('two');
    h.proxier.onEndpointsDelete(endpoints('a', ['127.0.0.1'], second.port));
    expect(await askTcp(ip, 8080)).not.toBe('second');
    client.write('three');
    expect((await readBytes(client, 5)).toString()).toBe('three');
    client.destroy();
  });

  it('serves a Service whose endpoints arrive as EndpointSlices after it', async () => {
    const h = await real();
    const web = await named('sliced');
    const ip = loopbackServiceIP();
    await h.synced(() =>
      h.proxier.onServiceAdd(
        service('a', { clusterIP: ip, ports: [{ name: 'p', port: 8080, protocol: 'TCP' }] }),
      ),
    );
    h.proxier.onEndpointSliceAdd({
      metadata: { namespace: 'ns', name: 'a-1', labels: { 'kubernetes.io/service-name': 'a' } },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['127.0.0.1'], conditions: { ready: true } }],
      ports: [{ name: 'p', port: web.port, protocol: 'TCP' }],
    });
    await untilTcp(ip, 8080, 'sliced');
  });
});
