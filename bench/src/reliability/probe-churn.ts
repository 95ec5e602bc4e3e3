import { applyServices, sleep, startDaemon, until } from './daemon.js';
import { EchoClient, echoBackends, manifest, roundTrip, type ServiceDoc, subnet } from './net.js';
import type { Probe } from './types.js';

/**
 * Endpoint churn under load: long-lived connections carry traffic while the services file's
 * endpoints change again and again, then through manifest reloads that add, reject and remove
 * other objects. Every connection must survive on the endpoint it had, and new clients must be
 * served throughout.
 */
export const churnProbe: Probe = async (ctx) => {
  const { connections, changes } = ctx.sizes.churn;
  const net = subnet();
  const ips = Array.from({ length: 12 }, (_, i) => `${net}${10 + i}`);
  const backends = await echoBackends(ips);
  const svc = (endpoints: string[], extra: Partial<ServiceDoc> = {}): ServiceDoc => ({
    name: 'churn',
    ip: `${net}1`,
    port: 8080,
    targetPort: backends.port,
    endpoints,
    ...extra,
  });
  const other: ServiceDoc = { ...svc(ips.slice(0, 2)), name: 'other', port: 8081 };
  const daemon = await startDaemon({
    net,
    build: ctx.build,
    services: manifest([svc(ips.slice(0, 4))]),
  });
  const clients: EchoClient[] = [];
  let traffic: ReturnType<typeof setInterval> | undefined;
  try {
    for (let i = 0; i < connections; i++) clients.push(new EchoClient(`${net}1`, 8080));
    const up = await until(() => clients.every((c) => c.connected || c.ended), 30_000);
    const failedToConnect = clients.filter((c) => !c.connected).length;
    const padding = 'x'.repeat(200);
    traffic = setInterval(() => {
      for (const c of clients) c.send(padding);
    }, 100);
    let applied = 0;
    let notApplied = 0;
    let newFailed = 0;
    let newTried = 0;
    let prev = '';
    const t0 = Date.now();
    for (let i = 0; i < changes; i++) {
      let eps: string[];
      do {
        const n = 2 + Math.floor(Math.random() * 7);
        eps = [...ips].sort(() => Math.random() - 0.5).slice(0, n);
      } while (eps.sort().join() === prev);
      prev = eps.join();
      const r = await applyServices(daemon, manifest([svc(eps)]));
      if (r === 'applied') applied++;
      else notApplied++;
      if (i % 10 === 0) {
        newTried++;
        const rt = await roundTrip(`${net}1`, 8080, 'new\n', 5000);
        if (!('ms' in rt)) newFailed++;
      }
      if (i % 100 === 0) ctx.log(`churn: ${i}/${changes} changes, ${applied} applied`);
    }
    const churnSeconds = (Date.now() - t0) / 1000;
    const lostInChurn = clients.filter((c) => c.ended).length;
    // Through manifest reloads: another Service added, a broken file (rejected, the last good
    // state keeps serving), the Service itself changed, the other Service removed.
    const base = ips.slice(2, 6);
    const reloads = [
      { text: manifest([svc(base), other]), want: 'applied' },
      {
        text: `${manifest([svc(base), other])}---\nkind: Service\nspec: [unclosed`,
        want: 'rejected',
      },
      {
        text: manifest([svc(base, { annotations: { 'kubernetes.io/description': 'v2' } }), other]),
        want: 'applied',
      },
      { text: manifest([svc(base)]), want: 'applied' },
    ];
    let reloadsAsExpected = 0;
    for (const r of reloads) {
      if ((await applyServices(daemon, r.text)) === r.want) reloadsAsExpected++;
      const rt = await roundTrip(`${net}1`, 8080, 'new\n', 5000);
      newTried++;
      if (!('ms' in rt)) newFailed++;
      await sleep(200);
    }
    // Every connection once more: each line sent must come back.
    clearInterval(traffic);
    traffic = undefined;
    for (const c of clients) c.send('last');
    await until(() => clients.every((c) => c.ended || c.settled()), 10_000);
    const lost = clients.filter((c) => c.ended || !c.settled()).length;
    const lines = clients.reduce((n, c) => n + c.checked, 0);
    const reasons = [...new Set(clients.map((c) => c.ended).filter(Boolean))].join(', ');
    return {
      id: 'churn',
      title: 'Endpoint churn under load, and manifest reloads',
      done:
        `${connections} long-lived TCP connections through one Service port, each sending a 200-byte ` +
        `line every 100 ms and checking its echo, while the services file was rewritten ${changes} ` +
        `times, each time with a different set of 2–8 of 12 endpoints (the next write after the ` +
        `daemon applied the last); a new connection every 10 changes. Then 4 manifest reloads: ` +
        `another Service added, a broken file (rejected), the Service's annotations changed, the ` +
        `other Service removed. Finally every connection sent one more line and waited for it.`,
      figures: [
        {
          name: 'established connections lost',
          value: `${lost} of ${connections}${reasons ? ` (${reasons})` : ''}`,
          goal: '0',
          pass: up && failedToConnect === 0 && lost === 0,
        },
        {
          name: 'endpoint changes applied',
          value: `${applied} of ${changes} in ${churnSeconds.toFixed(1)} s`,
          goal: `${changes}`,
          pass: applied === changes,
        },
        {
          name: 'lost during the endpoint changes (before the reloads)',
          value: String(lostInChurn),
          goal: '0',
          pass: lostInChurn === 0,
        },
        {
          name: 'manifest reloads applied or rejected as expected',
          value: `${reloadsAsExpected} of ${reloads.length}`,
          goal: `${reloads.length}`,
          pass: reloadsAsExpected === reloads.length,
        },
        {
          name: 'new connections failed',
          value: `${newFailed} of ${newTried}`,
          goal: '0',
          pass: newFailed === 0,
        },
        { name: 'lines echoed intact', value: String(lines), goal: '—' },
      ],
      notes: notApplied > 0 ? [`${notApplied} writes were not seen as a reload in 10 s.`] : [],
    };
  } finally {
    if (traffic) clearInterval(traffic);
    for (const c of clients) c.socket.destroy();
    await daemon.stop('SIGKILL');
    await backends.close();
  }
};
