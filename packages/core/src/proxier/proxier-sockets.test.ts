import diagnosticsChannel from 'node:diagnostics_channel';
import net from 'node:net';
import { describe, expect, it, onTestFinished } from 'vitest';
import { CHANNELS, type RefusedMessage } from '../diagnostics.js';
import type { EndpointsChange } from '../sockets/proxy-socket.js';
import { createProxySocketFactory } from '../sockets/proxy-socket-factory.js';
import { connectTcp, readBytes, readToEnd } from '../test-support/net-clients.js';
import {
  endpoints,
  loopbackServiceIP,
  service,
  useBackends,
  useProxierHarness,
} from '../test-support/proxier-harness.js';
import { type SpyLogger, spyLogger } from '../test-support/spy-logger.js';
import { waitFor } from '../test-support/wait-for.js';

const start = useProxierHarness();
const backends = useBackends();

describe('the socket context the Proxier hands a factory', () => {
  it('names the Service port, carries the Service with its annotations, and the load balancer', async () => {
    const h = await start();
    const annotated = service(
      'a',
      {},
      {
        metadata: {
          namespace: 'ns',
          name: 'a',
          uid: 'uid-a',
          annotations: { 'idling.alpha.openshift.io/idled-at': '2026-12-01T00:00:00Z' },
        },
      },
    );
    await h.synced(() => h.proxier.onServiceAdd(annotated));
    const context = h.sockets.open()[0]?.context;
    expect(context).toMatchObject({
      protocol: 'TCP',
      ip: '10.0.0.1',
      port: 80,
      servicePort: { namespace: 'ns', name: 'a', port: 'p', protocol: 'TCP' },
    });
    expect(context?.service.metadata.annotations).toEqual({
      'idling.alpha.openshift.io/idled-at': '2026-12-01T00:00:00Z',
    });
    expect(context?.loadBalancer).toBe(h.lb);
    expect(context?.signal.aborted).toBe(false);
  });

  it('pushes endpoint changes to subscribers, and aborts the signal when the socket goes', async () => {
    const h = await start();
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    const context = h.sockets.open()[0]?.context;
    const heard: EndpointsChange[] = [];
    context?.onEndpointsChanged((change) => heard.push(change));
    h.proxier.onEndpointsAdd(endpoints('a', ['10.1.0.1']));
    h.proxier.onEndpointsUpdate(endpoints('a', ['10.1.0.1']), endpoints('a', []));
    // Another Service's endpoints are not this socket's business.
    h.proxier.onEndpointsAdd(endpoints('b', ['10.1.0.2']));
    expect(heard.map((c) => c.hasEndpoints)).toEqual([true, false]);
    expect(heard[0]?.servicePort).toMatchObject({ namespace: 'ns', name: 'a', port: 'p' });
    await h.synced(() => h.proxier.onServiceDelete(service('a')));
    expect(context?.signal.aborted).toBe(true);
    h.proxier.onEndpointsAdd(endpoints('a', ['10.1.0.3']));
    expect(heard).toHaveLength(2);
  });

  it('tells slice-fed subscribers too, once the slices are merged', async () => {
    const h = await start();
    await h.synced(() => h.proxier.onServiceAdd(service('a')));
    const heard: boolean[] = [];
    h.sockets.open()[0]?.context?.onEndpointsChanged((c) => heard.push(c.hasEndpoints));
    h.proxier.onEndpointSliceAdd({
      metadata: { namespace: 'ns', name: 'a-1', labels: { 'kubernetes.io/service-name': 'a' } },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['10.1.0.1'], conditions: { ready: true } }],
      ports: [{ name: 'p', port: 8080, protocol: 'TCP' }],
    });
    expect(heard).toEqual([true]);
  });
});

describe('Proxier.mode and Proxier.drain', () => {
  it('reports its mode', async () => {
    const h = await start();
    expect(h.proxier.mode).toBe('service-port-portal');
  });

  async function proxied(name: string, logger?: SpyLogger) {
    const ip = loopbackServiceIP();
    const backend = await backends.tcp();
    const h = await start({
      nodePortAddresses: [],
      makeProxySocket: createProxySocketFactory(),
      ...(logger ? { logger } : {}),
    });
    const svc = service(name, {
      clusterIP: ip,
      ports: [{ name: 'p', port: 8080, protocol: 'TCP' }],
    });
    await h.synced(() => {
      h.proxier.onServiceAdd(svc);
      h.proxier.onEndpointsAdd(endpoints(name, [backend.host], backend.port));
    });
    const c = await connectTcp(8080, ip);
    c.on('error', () => {});
    c.write('x');
    expect((await readBytes(c, 1)).toString()).toBe('x');
    return { h, ip, c };
  }

  it('stops accepting, waits for established connections, and resolves when they end', async () => {
    const { h, ip, c } = await proxied('d');
    const drained = h.proxier.drain(60_000);
    // No new connection is accepted once the drain began.
    const attempt = () =>
      connectTcp(8080, ip).then(
        (s) => {
          s.destroy();
          return 'open';
        },
        () => 'refused',
      );
    await waitFor(async () => (await attempt()) === 'refused', 5_000, 'the listener closed');
    c.end();
    await readToEnd(c);
    expect(await drained).toEqual({ remaining: 0, timedOut: false });
    expect(await h.proxier.drain(1)).toEqual({ remaining: 0, timedOut: false });
  });

  it('does not warn that a proxy loop ended while serving when a graceful stop closed it', async () => {
    const logger = spyLogger();
    const { h, c } = await proxied('w', logger);
    c.destroy();
    expect(await h.proxier.drain(5_000)).toMatchObject({ timedOut: false });
    await h.proxier.shutdown();
    // The loops end once their sockets close; let their settlement run before looking.
    await new Promise((resolve) => setImmediate(resolve));
    const warned = logger.warn.mock.calls.map((args) => String(args[0]));
    expect(warned.filter((m) => m.includes('ended while serving'))).toEqual([]);
  });

  it('resets the connections still open at the deadline, so a cut stream does not look complete', async () => {
    const { h, c } = await proxied('f');
    const outcome = new Promise<string>((resolve) => {
      c.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
      c.on('end', () => resolve('FIN'));
    });
    expect(await h.proxier.drain(20)).toEqual({ remaining: 1, timedOut: true });
    expect(await outcome).toBe('ECONNRESET');
  });

  it('counts and waits for a connection still dialling its endpoint, then resets it', async () => {
    let dialling = 0;
    // Never connects, like a SYN sent into a black hole.
    const connect = (): net.Socket => {
      dialling++;
      return new net.Socket();
    };
    const ip = loopbackServiceIP();
    const h = await start({
      nodePortAddresses: [],
      makeProxySocket: createProxySocketFactory({ connect, dialTimeoutsMs: [30_000] }),
    });
    await h.synced(() => {
      h.proxier.onServiceAdd(
        service('g', { clusterIP: ip, ports: [{ name: 'p', port: 8080, protocol: 'TCP' }] }),
      );
      h.proxier.onEndpointsAdd(endpoints('g', ['127.0.0.1'], 9));
    });
    const c = await connectTcp(8080, ip);
    const outcome = new Promise<string>((resolve) => {
      c.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
      c.on('end', () => resolve('FIN'));
    });
    await waitFor(() => dialling === 1, 5_000, 'the dial started');
    const began = performance.now();
    expect(await h.proxier.drain(150)).toEqual({ remaining: 1, timedOut: true });
    expect(performance.now() - began).toBeGreaterThanOrEqual(140);
    expect(await outcome).toBe('ECONNRESET');
  });

  it('gives up at the deadline and says how many connections are still open', async () => {
    const { h } = await proxied('e');
    expect(await h.proxier.drain(20)).toEqual({ remaining: 1, timedOut: true });
  });
});

describe('loadBalancerSourceRanges', () => {
  /** A client from `local` to `host:port`: what it read before the connection ended. */
  function ask(host: string, port: number, local: string): Promise<string> {
    return new Promise((resolve) => {
      const socket = net.connect({ host, port, localAddress: local });
      let got = '';
      socket.on('data', (chunk) => {
        got += chunk.toString();
      });
      socket.on('error', () => resolve(`${got}|error`));
      socket.on('close', () => resolve(got));
    });
  }

  it('admits only the source ranges on a load-balancer IP, and everyone on the cluster IP', async () => {
    const refused: string[] = [];
    const onRefused = (m: unknown) => refused.push((m as RefusedMessage).reason);
    diagnosticsChannel.subscribe(CHANNELS.refused, onRefused);
    onTestFinished(() => {
      diagnosticsChannel.unsubscribe(CHANNELS.refused, onRefused);
    });
    const backend = await backends.tcp('hello');
    const clusterIP = loopbackServiceIP();
    let lbIP = loopbackServiceIP();
    while (lbIP === clusterIP) lbIP = loopbackServiceIP();
    const h = await start({ nodePortAddresses: [], makeProxySocket: createProxySocketFactory() });
    const svc = service(
      'lb',
      {
        type: 'LoadBalancer',
        clusterIP,
        ports: [{ name: 'p', port: 8080, protocol: 'TCP' }],
        loadBalancerSourceRanges: ['127.0.0.1/32', ' 10.0.0.0/8 '],
      },
      { status: { loadBalancer: { ingress: [{ ip: lbIP }] } } },
    );
    await h.synced(() => {
      h.proxier.onServiceAdd(svc);
      h.proxier.onEndpointsAdd(endpoints('lb', [backend.host], backend.port));
    });
    expect(await ask(lbIP, 8080, '127.0.0.1')).toBe('hello');
    expect(await ask(lbIP, 8080, '127.0.0.2')).not.toContain('hello');
    expect(await ask(clusterIP, 8080, '127.0.0.2')).toBe('hello');
    await waitFor(() => refused.includes('source-range'), 5_000, 'a source-range refusal');
    expect(refused.filter((r) => r === 'source-range')).toHaveLength(1);
  });
});
