import { get } from 'node:http';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { type IdlingDemo, startIdlingDemo } from './index.js';

let demo: IdlingDemo | undefined;
afterEach(async () => {
  await demo?.stop();
  demo = undefined;
});

function randomLoopback(): string {
  const byte = () => 1 + Math.floor(Math.random() * 250);
  return `127.${byte()}.${byte()}.${byte()}`;
}

describe('the idling-proxier example', () => {
  it('holds a request to an idled Service, wakes the backend through the hook, and completes it', async () => {
    const ip = randomLoopback();
    demo = await startIdlingDemo(ip);
    const d = demo;
    await vi.waitFor(() => expect(d.proxier.serviceInfos().length).toBeGreaterThan(0), 5_000);
    expect(d.proxier.isIdled('demo', 'web')).toBe(true);
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
    expect(body).toBe('hello from the woken backend\n');
    expect(d.requests).toHaveLength(1);
    expect(d.requests[0]?.servicePort).toMatchObject({
      namespace: 'demo',
      name: 'web',
      port: 'http',
    });
    expect(d.idler.stats()).toMatchObject({ handedOver: 1, handOverFailures: 0 });
    expect(d.proxier.isIdled('demo', 'web')).toBe(false);
  });
});
