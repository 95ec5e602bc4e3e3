import { createProxySocketFactory, servicePortNameString } from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it } from 'vitest';
import { startUdpEchoServer } from '../../core/src/test-support/echo-servers.js';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { spyLogger } from '../../core/src/test-support/spy-logger.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { withNativeUdp } from './index.js';
import { HAS_CC, proxyInTest, randomLoopback, useCleanup } from './test-support/native-tests.js';

const cleanup = useCleanup();

describe.skipIf(!HAS_CC)('a helper that keeps dying', () => {
  it('backs off (20, 40, 80 ms) and logs one line per death, not a stack per socket', async () => {
    const b = await startUdpEchoServer({ host: randomLoopback() });
    cleanup.push(() => b.close());
    const f = withNativeUdp(createProxySocketFactory(), { threads: 1, restartBackoffMs: 20 });
    cleanup.push(() => f.close());
    const logger = spyLogger();
    for (const name of ['a', 'b', 'c']) {
      const servicePort = { namespace: 'ns', name, port: 'p', protocol: 'UDP' as const };
      const lb = new FakeLoadBalancer({ [servicePortNameString(servicePort)]: [b.endpoint] });
      const ctx = createSocketContext({
        loadBalancer: lb,
        protocol: 'UDP',
        ip: randomLoopback(),
        servicePort,
        logger,
      });
      const socket = await f(ctx);
      proxyInTest(socket, ctx, fakeServiceInfo({ protocol: 'UDP' }), cleanup);
    }
    const servedAgain = (): number =>
      logger.info.mock.calls.filter((c) => String(c[0]).startsWith('serving again')).length;
    for (let death = 1; death <= 4; death++) {
      // Killed as soon as every socket serves again: a helper that crashes shortly after start.
      await waitFor(() => servedAgain() === 3 * (death - 1), 5000, `restart ${death - 1} served`);
      process.kill(f.helperPid() as number, 'SIGKILL');
      await waitFor(() => f.counters.helperExits === death, 5000, `death ${death}`);
    }
    await waitFor(() => servedAgain() === 12, 5000, 'the last restart served');
    const delays = logger.error.mock.calls
      .map((c) =>
        /helper is down .*restarting it in (\d+) ms; 3 socket\(s\) down/.exec(String(c[0])),
      )
      .map((m) => Number(m?.[1]));
    expect(delays).toEqual([20, 40, 80, 160]);
  }, 20_000);
});
