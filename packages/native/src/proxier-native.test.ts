import { createHash, randomBytes } from 'node:crypto';
import { createProxySocketFactory } from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import { startTcpServer } from '../../core/src/test-support/echo-servers.js';
import { connectTcp, readToEnd } from '../../core/src/test-support/net-clients.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { withNativeTcp } from './index.js';
import {
  HAS_CC,
  randomLoopback,
  serviceAt,
  sliceOf,
  startProxier,
  useCleanup,
} from './test-support/native-tests.js';

const cleanup = useCleanup();
const web = { name: 'web', portName: 'http', port: 8080, protocol: 'TCP' } as const;
const service = (ip: string) => serviceAt(web, ip);
const slice = (ip: string, port: number) => sliceOf(web, [ip], port);

describe.skipIf(!HAS_CC)('a Proxier with withNativeTcp', () => {
  it('serves a Service in service-port-portal mode through the helper, end to end', async () => {
    const b = await startTcpServer({ host: randomLoopback() });
    cleanup.push(() => b.close());
    const factory = withNativeTcp(createProxySocketFactory(), { threads: 2 });
    cleanup.push(() => factory.close());
    const proxier = await startProxier(factory, cleanup);
    const ip = randomLoopback();
    proxier.onServiceAdd(service(ip));
    proxier.onEndpointSliceAdd(slice(b.host, b.port));
    const svcPort = { namespace: 'ns', name: 'web', port: 'http', protocol: 'TCP' as const };
    await waitFor(() => proxier.getServiceInfo(svcPort), 5000, 'the Service served');
    expect(factory.helperPid()).toBeDefined();
    const payload = randomBytes(1 << 20);
    const c = await connectTcp(8080, ip);
    const got = readToEnd(c);
    c.end(payload);
    const { data, ended } = await got;
    expect(ended).toBe('end');
    expect(createHash('sha256').update(data).digest('hex')).toBe(
      createHash('sha256').update(payload).digest('hex'),
    );
    // The Proxier's round-robin balancer, no affinity: the later connections take picks made ahead.
    for (let i = 0; i < 10; i++) {
      const k = await connectTcp(8080, ip);
      const r = readToEnd(k);
      k.end('x');
      expect((await r).data.toString()).toBe('x');
    }
    // Counted once their frames reach Node, up to a millisecond later (the helper's lazy frames).
    await waitFor(() => factory.counters.dialsAhead >= 8, 5000, 'the picked dials counted');
    // The Service goes away: its listener closes, and with it the last user of the helper.
    proxier.onServiceDelete(service(ip));
    await waitFor(() => factory.helperPid() === undefined, 5000, 'the helper stopped when unused');
  });
});
