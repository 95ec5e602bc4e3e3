/**
 * By hand: 10 000 TCP clients held by the idler across 100 Service ports, then one endpoint event
 * per port. Prints the proxy's RSS per held client and the time from the first endpoint event to
 * the last held client's first byte at its backend. Three processes, so the proxy's RSS is its own:
 * this one (the idling sockets), a client process and a backend process (forked from this file).
 *
 *   ulimit -n 65536   # the proxy needs two descriptors per client after the hand-over
 *   node --expose-gc --import tsx --conditions=@userspace-proxy/source bench/src/idler-hold.ts [clients] [ports]
 *
 * Imports the idler by path: bench/package.json does not depend on @userspace-proxy/idler (yet).
 */
import { type ChildProcess, fork } from 'node:child_process';
import diagnosticsChannel from 'node:diagnostics_channel';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { type ProxySocket, RoundRobinLoadBalancer, type ServiceInfo } from '@userspace-proxy/core';
import { createSocketContext, type StandaloneSocketContext } from '@userspace-proxy/core/sockets';
import { createIdlingProxySocketFactory, Idler } from '../../packages/idler/src/index.js';

const role = process.argv[2];

type Msg = { type: string; [k: string]: unknown };

function send(message: Msg): void {
  process.send?.(message);
}

if (role === 'backend') {
  const expected = Number(process.argv[3]);
  let first = 0;
  const server = net.createServer((socket) => {
    socket.on('error', () => {});
    socket.once('data', () => {
      first++;
      if (first === expected) send({ type: 'all-first-bytes' });
    });
  });
  server.listen({ port: 0, host: '127.0.0.1', backlog: 65_535 }, () => {
    send({ type: 'listening', port: (server.address() as net.AddressInfo).port });
  });
} else if (role === 'clients') {
  process.on('message', (m: Msg) => {
    if (m.type !== 'connect') return;
    const ip = m.ip as string;
    const ports = m.ports as number[];
    const perPort = m.perPort as number;
    const targets = ports.flatMap((port) => Array.from({ length: perPort }, () => port));
    const sockets: net.Socket[] = [];
    let next = 0;
    let connected = 0;
    const open = (): void => {
      const port = targets[next++];
      if (port === undefined) return;
      const socket = net.connect({ host: ip, port }, () => {
        socket.write('x');
        connected++;
        if (connected === targets.length) send({ type: 'connected' });
        open();
      });
      socket.on('error', (error) => send({ type: 'error', message: String(error) }));
      sockets.push(socket);
    };
    for (let i = 0; i < 256; i++) open();
  });
} else {
  const clients = Number(process.argv[2] ?? 10_000);
  const portsCount = Number(process.argv[3] ?? 100);
  const perPort = Math.ceil(clients / portsCount);
  const total = perPort * portsCount;
  const self = fileURLToPath(import.meta.url);
  const child = (args: string[]): ChildProcess => fork(self, args, { stdio: 'inherit' });
  const once = (proc: ChildProcess, type: string): Promise<Msg> =>
    new Promise((resolve) => {
      const on = (m: Msg) => {
        if (m.type === 'error') console.error('client error:', m.message);
        if (m.type !== type) return;
        proc.off('message', on);
        resolve(m);
      };
      proc.on('message', on);
    });

  const backend = child(['backend', String(total)]);
  const backendPort = (await once(backend, 'listening')).port as number;
  const ip = '127.77.0.1';
  const lb = new RoundRobinLoadBalancer();
  const idler = new Idler({ maxHeldPerServicePort: perPort, maxHeldTotal: total });
  const factory = createIdlingProxySocketFactory({ idler });
  const info = { isAlive: () => true, udpIdleTimeoutMs: 10_000, activeClients: new Map() };
  const contexts: StandaloneSocketContext[] = [];
  const sockets: ProxySocket[] = [];
  for (let i = 0; i < portsCount; i++) {
    const servicePort = {
      namespace: 'bench',
      name: `svc-${i}`,
      port: 'p',
      protocol: 'TCP' as const,
    };
    const context = createSocketContext({ loadBalancer: lb, ip, servicePort });
    const socket = await factory(context);
    void socket.proxyLoop(info as unknown as ServiceInfo);
    contexts.push(context);
    sockets.push(socket);
  }
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  const rssBefore = process.memoryUsage().rss;
  const clientProc = child(['clients']);
  const connected = once(clientProc, 'connected');
  clientProc.send({ type: 'connect', ip, ports: sockets.map((s) => s.addr().port), perPort });
  await connected;
  const deadline = Date.now() + 60_000;
  while (idler.stats().heldNow < total && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  gc?.();
  const rssHeld = process.memoryUsage().rss;
  let dialErrors = 0;
  diagnosticsChannel.subscribe('userspace-proxy:dial:error', () => {
    dialErrors++;
  });
  const allFirst = once(backend, 'all-first-bytes');
  const t0 = performance.now();
  for (const context of contexts) {
    lb.onEndpointsAdd({
      metadata: { namespace: 'bench', name: context.servicePort.name },
      subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'p', port: backendPort }] }],
    });
    context.notifyEndpointsChanged();
  }
  const tEvents = performance.now() - t0;
  await allFirst;
  const tLast = performance.now() - t0;
  const stats = idler.stats();
  console.log(
    JSON.stringify(
      {
        heldClients: total,
        servicePorts: portsCount,
        gcAvailable: gc !== undefined,
        rssBeforeMiB: +(rssBefore / 2 ** 20).toFixed(1),
        rssHeldMiB: +(rssHeld / 2 ** 20).toFixed(1),
        rssPerHeldClientKiB: +((rssHeld - rssBefore) / total / 1024).toFixed(2),
        endpointEventsMs: +tEvents.toFixed(1),
        lastFirstByteAtBackendMs: +tLast.toFixed(1),
        handedOver: stats.handedOver,
        handOverFailures: stats.handOverFailures,
        dialAttemptsFailed: dialErrors,
      },
      null,
      2,
    ),
  );
  clientProc.kill();
  backend.kill();
  idler.close();
  for (const socket of sockets) await socket.close();
  process.exit(0);
}
