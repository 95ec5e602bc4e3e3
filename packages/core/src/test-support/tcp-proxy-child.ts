/**
 * A TCP proxy socket in a process of its own, for tests that must exhaust its file descriptors
 * (run it under `ulimit -n`). Usage: `node --import tsx tcp-proxy-child.ts <endpoint> [ip]`.
 * It prints one JSON line per event on stdout: `{"listening":port}` first, then
 * `{"event":"acceptError"|"refused"|"dialError","detail":...}`; "exit" on stdin ends it cleanly.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { CHANNELS } from '../diagnostics.js';
import { createProxySocketFactory } from '../sockets/proxy-socket-factory.js';
import { createSocketContext } from '../sockets/socket-context.js';
import { FakeLoadBalancer } from './fake-load-balancer.js';
import { fakeServiceInfo } from './fake-service-info.js';

const [endpoint = '', ip = '127.0.0.1'] = process.argv.slice(2);
const say = (value: unknown): void => {
  process.stdout.write(`${JSON.stringify(value)}\n`);
};
const codeOf = (error: unknown): string =>
  String(
    (error as { code?: unknown; cause?: { code?: unknown } })?.cause?.code ??
      (error as { code?: unknown })?.code,
  );

diagnosticsChannel.subscribe(CHANNELS.acceptError, (m) => {
  say({ event: 'acceptError', detail: codeOf((m as { error: unknown }).error) });
});
diagnosticsChannel.subscribe(CHANNELS.refused, (m) => {
  say({ event: 'refused', detail: (m as { reason: string }).reason });
});
diagnosticsChannel.subscribe(CHANNELS.dialError, (m) => {
  say({ event: 'dialError', detail: codeOf((m as { error: unknown }).error) });
});

const service = { namespace: 'ns', name: 'child', port: 'p' };
const lb = new FakeLoadBalancer({ 'ns/child:p': [endpoint] });
const socket = await createProxySocketFactory({ acceptBackoffMs: 20 })(
  createSocketContext({ loadBalancer: lb, ip, servicePort: service }),
);
void socket.proxyLoop(fakeServiceInfo());
say({ listening: socket.addr().port });
process.stdin.on('data', (data) => {
  if (data.toString().includes('exit')) void socket.close().then(() => process.exit(0));
});
