import { httpGet, sleep, startDaemon, until } from './daemon.js';
import { EchoClient, echoBackends, manifest, quantile, roundTrip, subnet } from './net.js';
import type { Probe } from './types.js';

/** Opens connections 8 at a time until a batch has one that is not served; returns the served ones. */
async function exhaust(host: string, port: number, max: number) {
  const served: EchoClient[] = [];
  let firstFailure = '';
  while (served.length < max) {
    const batch = Array.from({ length: 8 }, () => new EchoClient(host, port));
    await until(() => batch.every((c) => c.connected || c.ended), 2000);
    for (const c of batch) c.send();
    await until(() => batch.every((c) => c.ended || (c.connected && c.settled())), 1000);
    for (const c of batch) {
      if (!c.ended && c.connected && c.settled() && c.sent > 0) served.push(c);
      else {
        firstFailure ||= c.ended ?? (c.connected ? 'no answer in 1 s' : 'not connected');
        c.socket.destroy();
      }
    }
    if (firstFailure) break;
  }
  return { served, firstFailure };
}

/**
 * Descriptor exhaustion: the daemon runs with a low RLIMIT_NOFILE (prlimit), connections are opened
 * until one is no longer served, then some are closed; how soon is a new client served again?
 */
export const fdExhaustionProbe: Probe = async (ctx) => {
  const { nofile, cycles } = ctx.sizes.fdExhaustion;
  const net = subnet();
  const backends = await echoBackends([`${net}10`]);
  const host = `${net}1`;
  const daemon = await startDaemon({
    net,
    build: ctx.build,
    nofile,
    services: manifest([
      { name: 'fd', ip: host, port: 8080, targetPort: backends.port, endpoints: [`${net}10`] },
    ]),
  });
  const held: EchoClient[] = [];
  const recoveries: number[] = [];
  const failures = new Set<string>();
  const heldAtExhaustion: number[] = [];
  let healthDuring = '';
  try {
    for (let cycle = 0; cycle < cycles; cycle++) {
      const { served, firstFailure } = await exhaust(host, 8080, nofile);
      held.push(...served);
      failures.add(firstFailure);
      heldAtExhaustion.push(held.length);
      if (cycle === 0) {
        const h = await httpGet(`${daemon.healthz}/healthz`, 2000);
        healthDuring = h.status ? String(h.status) : h.body;
      }
      // Free a quarter of the descriptors' worth of connections, then try until one is served.
      const free = held.splice(0, Math.max(4, Math.floor(held.length / 4)));
      const t0 = performance.now();
      for (const c of free) c.socket.destroy();
      let recovered: number | undefined;
      const attempts: Promise<void>[] = [];
      while (recovered === undefined && performance.now() - t0 < 10_000) {
        attempts.push(
          roundTrip(host, 8080, 'again\n', 2000).then((r) => {
            if ('ms' in r) recovered ??= performance.now() - t0;
          }),
        );
        await sleep(20);
      }
      await Promise.all(attempts);
      recoveries.push(recovered ?? Number.POSITIVE_INFINITY);
      ctx.log(
        `fd-exhaustion: cycle ${cycle + 1}: ${heldAtExhaustion[cycle]} held, served again after ${recovered?.toFixed(0)} ms`,
      );
      await sleep(200);
    }
    for (const c of held) c.socket.destroy();
    held.length = 0;
    await sleep(500);
    const after = await roundTrip(host, 8080, 'after\n', 3000);
    const worst = Math.max(...recoveries);
    return {
      id: 'fd-exhaustion',
      title: 'Descriptor exhaustion',
      done:
        `The daemon ran with RLIMIT_NOFILE ${nofile} (prlimit). ${cycles} time(s): TCP connections ` +
        `were opened through one Service port 8 at a time, each checked with an echo, until one was ` +
        `not served; then a quarter of the held connections were closed and a new connection was ` +
        `tried every 20 ms until one was served (its echo back), timed from the close.`,
      figures: [
        {
          name: 'connections served when descriptors ran out',
          value: heldAtExhaustion.join(', '),
          goal: '—',
        },
        { name: 'what the first unserved client saw', value: [...failures].join('; '), goal: '—' },
        { name: 'health server /healthz while exhausted', value: healthDuring, goal: '—' },
        {
          name: 'time from freeing to the first new client served (worst; median)',
          value: `${worst.toFixed(0)} ms; ${quantile(recoveries, 0.5).toFixed(0)} ms`,
          goal: '< 1000 ms',
          pass: worst < 1000,
        },
        {
          name: 'served after every connection closed; daemon running',
          value: `${'ms' in after ? 'yes' : `no (${after.error})`}; ${daemon.alive() ? 'yes' : 'no'}`,
          goal: 'yes; yes',
          pass: 'ms' in after && daemon.alive(),
        },
      ],
      notes: [],
    };
  } finally {
    for (const c of held) c.socket.destroy();
    await daemon.stop('SIGKILL');
    await backends.close();
  }
};
