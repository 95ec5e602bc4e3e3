import { connect, createServer, type Server } from 'node:net';
import { createProxySocketFactory, newCustomProxier, type Proxier } from '@userspace-proxy/core';
import { afterEach, describe, expect, it } from 'vitest';
import { holdUntilEndpoints, newCountingProxier } from './index.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A TCP server on 127.0.0.1 that answers every connection with "hello" and closes. */
async function backend(): Promise<number> {
  const server: Server = createServer((socket) => socket.end('hello'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  return address.port;
}

/** The reply of host:port ("" when the proxy closed the connection without one). */
function ask(host: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    let reply = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      reply += chunk;
    });
    socket.on('error', () => {});
    socket.on('close', () => resolve(reply));
  });
}

/** Polls `check` every 10 ms for up to 10 s: syncs are asynchronous. */
async function until(check: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('custom-proxy-socket example', () => {
  it('counts new connections and refuses those over the rate', async () => {
    let now = 0;
    const { proxier, policies } = await newCountingProxier(
      { mode: 'service-port-portal', nodePortAddresses: ['127.0.0.0/8'] },
      { maxNewPerSecond: 2, now: () => now },
    );
    const stop = new AbortController();
    const loop = proxier.syncLoop(stop.signal);
    cleanups.push(async () => {
      await proxier.shutdown();
      stop.abort();
      await loop;
    });

    const port = await backend();
    const ip = `127.1.${100 + Math.floor(Math.random() * 150)}.${1 + Math.floor(Math.random() * 250)}`;
    proxier.onEndpointsAdd({
      metadata: { namespace: 'demo', name: 'web' },
      subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'http', port }] }],
    });
    proxier.onServiceAdd({
      metadata: { namespace: 'demo', name: 'web' },
      spec: { clusterIP: ip, ports: [{ name: 'http', protocol: 'TCP', port: 8080 }] },
    });
    proxier.onServiceSynced();
    proxier.onEndpointsSynced();
    const svc = { namespace: 'demo', name: 'web', port: 'http' };
    await until(() => proxier.getServiceInfo(svc)?.isStarted() === true);
    expect(policies).toHaveLength(1);
    const [policy] = policies;

    expect(await ask(ip, 8080)).toBe('hello');
    expect(await ask(ip, 8080)).toBe('hello');
    expect(await ask(ip, 8080)).toBe(''); // the third in this second is refused
    expect(policy?.counts).toMatchObject({ accepted: 2, refused: 1 });

    now += 1000; // a new second
    expect(await ask(ip, 8080)).toBe('hello');
    expect(policy?.counts).toMatchObject({ accepted: 3, refused: 1 });
    await until(() => policy?.counts.open === 0);

    // A socket that closes (here: the Service is deleted) leaves the list.
    proxier.onServiceDelete({
      metadata: { namespace: 'demo', name: 'web' },
      spec: { clusterIP: ip, ports: [{ name: 'http', protocol: 'TCP', port: 8080 }] },
    });
    await until(() => policies.length === 0);
  });

  it('holds a client while the Service has no endpoints and hands it over when they come', async () => {
    const proxier: Proxier = await newCustomProxier(
      { mode: 'service-port-portal', nodePortAddresses: [] },
      createProxySocketFactory({ acceptPolicy: holdUntilEndpoints }),
    );
    const stop = new AbortController();
    const loop = proxier.syncLoop(stop.signal);
    cleanups.push(async () => {
      await proxier.shutdown();
      stop.abort();
      await loop;
    });
    const ip = `127.1.${100 + Math.floor(Math.random() * 150)}.${1 + Math.floor(Math.random() * 250)}`;
    proxier.onServiceAdd({
      metadata: { namespace: 'demo', name: 'idle' },
      spec: { clusterIP: ip, ports: [{ name: 'http', protocol: 'TCP', port: 8080 }] },
    });
    proxier.onServiceSynced();
    proxier.onEndpointsSynced();
    const svc = { namespace: 'demo', name: 'idle', port: 'http' };
    await until(() => proxier.getServiceInfo(svc)?.isStarted() === true);
    const reply = ask(ip, 8080);
    // The client waits, held; the endpoint arrives; the held client gets its answer.
    const port = await backend();
    proxier.onEndpointsAdd({
      metadata: { namespace: 'demo', name: 'idle' },
      subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'http', port }] }],
    });
    expect(await reply).toBe('hello');
  });
});
