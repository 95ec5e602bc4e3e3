/**
 * Runs the example for a person: an idled Service on a loopback address, one HTTP request that is
 * held until the unidle hook has started the backend, and the timings.
 * `npx -y pnpm@12.4.2 --filter @userspace-proxy/example-idling-proxier start`
 */
import { get } from 'node:http';
import { startIdlingDemo } from './index.js';

const ip = process.env.EXAMPLE_SERVICE_IP ?? '127.10.9.2';
const demo = await startIdlingDemo(ip);
const { proxier } = demo;
const deadline = Date.now() + 5_000;
while (!proxier.serviceInfos().length && Date.now() < deadline) {
  await new Promise((resolve) => setTimeout(resolve, 10));
}
const started = performance.now();
console.log(`GET http://${ip}:8080/ (the Service has no endpoints: the request is held)`);
const body = await new Promise<string>((resolve, reject) => {
  get({ host: ip, port: 8080, path: '/' }, (res) => {
    let text = '';
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => {
      text += chunk;
    });
    res.on('end', () => resolve(text));
  }).on('error', reject);
});
console.log(`answer after ${(performance.now() - started).toFixed(0)} ms: ${body.trim()}`);
console.log(`NeedPods asked ${demo.requests.length} time(s); idler stats:`, demo.idler.stats());
await demo.stop();
