/**
 * Runs the example for a person: a backend on 127.0.0.1, a Proxier in service-port-portal mode
 * whose listener on a loopback Service address counts and rate-limits, and five quick requests.
 * `npx -y pnpm@12.4.2 --filter @userspace-proxy/example-custom-proxy-socket start`
 */
import { connect, createServer } from 'node:net';
import { newCountingProxier } from './index.js';

const ip = process.env.EXAMPLE_SERVICE_IP ?? '127.10.9.1';
const backend = createServer((socket) => socket.end('hello from the backend\n'));
await new Promise<void>((resolve) => backend.listen(0, '127.0.0.1', resolve));
const backendPort = (backend.address() as { port: number }).port;

const { proxier, policies } = await newCountingProxier(
  { mode: 'service-port-portal', nodePortAddresses: [] },
  { maxNewPerSecond: 3 },
);
const stop = new AbortController();
const loop = proxier.syncLoop(stop.signal);
proxier.onEndpointsAdd({
  metadata: { namespace: 'demo', name: 'web' },
  subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'http', port: backendPort }] }],
});
proxier.onServiceAdd({
  metadata: { namespace: 'demo', name: 'web' },
  spec: { clusterIP: ip, ports: [{ name: 'http', protocol: 'TCP', port: 8080 }] },
});
proxier.onServiceSynced();
proxier.onEndpointsSynced();
while (
  proxier.getServiceInfo({ namespace: 'demo', name: 'web', port: 'http' })?.isStarted() !== true
) {
  await new Promise((resolve) => setTimeout(resolve, 10));
}

const ask = () =>
  new Promise<string>((resolve) => {
    let reply = '';
    const socket = connect({ host: ip, port: 8080 });
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      reply += chunk;
    });
    socket.on('error', () => {});
    socket.on('close', () => resolve(reply.trim() || '(refused by the policy)'));
  });
for (let i = 1; i <= 5; i++) console.log(`request ${i} to ${ip}:8080: ${await ask()}`);
console.log('counts:', policies[0]?.counts);

await proxier.shutdown();
stop.abort();
await loop;
backend.close();
