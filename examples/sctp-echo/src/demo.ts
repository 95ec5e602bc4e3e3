/**
 * Runs the example for a person: an SCTP echo Service on 127.10.11.1:3868 through the proxy, its
 * endpoint an echo server on 127.10.11.2 (our engine, or usrsctp's echo_server with
 * EXAMPLE_USRSCTP=1), all over RFC 6951 UDP encapsulation on port 9899.
 * `npx -y pnpm@12.4.2 --filter @userspace-proxy/example-sctp-echo start`
 */
import { echo, startEcho } from './index.js';

const serviceIp = process.env.EXAMPLE_SERVICE_IP ?? '127.10.11.1';
const backendIp = process.env.EXAMPLE_BACKEND_IP ?? '127.10.11.2';
const encapsulationPort = Number(process.env.EXAMPLE_ENCAPSULATION_PORT ?? 9899);
const running = await startEcho({
  serviceIp,
  servicePort: 3868,
  // usrsctp's echo_server binds every address: it needs 127.0.0.1 and a port of its own.
  backendIp: process.env.EXAMPLE_USRSCTP ? '127.0.0.1' : backendIp,
  encapsulationPort,
  usrsctp: process.env.EXAMPLE_USRSCTP === '1',
});
console.log(`SCTP Service ${serviceIp}:3868 (UDP ${encapsulationPort}) -> ${running.backend}`);
const a = await running.client.connect({
  address: serviceIp,
  port: 3868,
  encapsulationPort,
  signal: AbortSignal.timeout(10_000),
});
const messages = [
  { streamId: 0, ppid: 46, data: Buffer.from('hello over stream 0') },
  { streamId: 1, ppid: 47, data: Buffer.from('hello over stream 1') },
  { streamId: 2, ppid: 51, data: Buffer.alloc(5000, 'x') },
];
for (const m of await echo(a, messages)) {
  const text = m.data.length > 40 ? `${m.data.length} bytes` : JSON.stringify(m.data.toString());
  console.log(`echo on stream ${m.streamId}, PPID ${m.ppid}: ${text}`);
}
const closed = new Promise<string>((r) => a.once('close', (i) => r(i.reason)));
a.shutdown();
console.log(`association closed: ${await closed}`);
await running.stop();
console.log('stopped.');
