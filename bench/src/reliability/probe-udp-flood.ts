import { createSocket } from 'node:dgram';
import { sleep, startDaemon, until } from './daemon.js';
import { manifest, subnet } from './net.js';
import { PeerProcess } from './peer.js';
import type { Probe } from './types.js';

const SESSIONS = 'userspace_proxy_udp_sessions_active';
const MIB = 1024 * 1024;

/** Sends one datagram from a fresh socket bound to `from` and waits for the echo. */
function udpAsk(from: string, host: string, port: number, timeoutMs = 2000): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createSocket('udp4');
    const done = (ok: boolean) => {
      clearTimeout(timer);
      s.close();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    s.on('message', () => done(true));
    s.on('error', () => done(false));
    s.bind(0, from, () => s.send('hello', port, host));
  });
}

/**
 * A flood of UDP clients, each a new source port: first from one address (which may take only its
 * share of the session cap, so another address is still served), then from several (which fill the
 * cap, and no more). The daemon's memory must stay bounded by the cap, whatever the flood's size.
 */
export const udpFloodProbe: Probe = async (ctx) => {
  const { sourcePorts, singleSourcePorts, sources, cap } = ctx.sizes.udpFlood;
  const idleS = ctx.sizes.kind === 'smoke' ? 2 : 15;
  const share = Math.ceil(cap / 4);
  const net = subnet();
  const echo = createSocket('udp4');
  echo.on('message', (m, r) => echo.send(m, r.port, r.address));
  await new Promise<void>((r) => echo.bind(0, `${net}10`, () => r()));
  const bport = echo.address().port;
  const flooder = new PeerProcess();
  const daemon = await startDaemon({
    net,
    build: ctx.build,
    services: manifest([
      {
        name: 'dns',
        ip: `${net}1`,
        port: 5300,
        protocol: 'UDP',
        targetPort: bport,
        endpoints: [`${net}10`],
      },
    ]),
    top: { udpIdleTimeout: `${idleS}s` },
    userspaceProxy: { maxUdpSessionsPerPort: cap },
  });
  let maxGauge = 0;
  let peakRss = 0;
  let rssAtCap = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const g = (await daemon.metrics().catch(() => undefined))?.get(SESSIONS) ?? 0;
      maxGauge = Math.max(maxGauge, g);
      peakRss = Math.max(peakRss, daemon.rss());
      if (g >= cap && rssAtCap === 0) rssAtCap = daemon.rss();
      await sleep(250);
    }
  })();
  try {
    for (let i = 0; i < 10; i++) await udpAsk(`${net}50`, `${net}1`, 5300);
    const rssBefore = daemon.rss();
    const warm = (await daemon.metrics()).get(SESSIONS) ?? 0;
    // One source address, many ports: held to its share.
    const one = await flooder.call(
      'udpFlood',
      `${net}1`,
      5300,
      [`${net}100`],
      singleSourcePorts,
      10_000,
      500,
    );
    await sleep(500);
    // The flooding address's sessions: the gauge less the warm-up's (from another address).
    const afterOne = ((await daemon.metrics()).get(SESSIONS) ?? 0) - warm;
    const otherServed = await udpAsk(`${net}51`, `${net}1`, 5300, 3000);
    ctx.log(
      `udp-flood: one source ${one.sent} sent, sessions ${afterOne}, other served ${otherServed}`,
    );
    // Many source addresses: the cap fills and holds.
    const addrs = Array.from({ length: sources }, (_, i) => `${net}${101 + i}`);
    const perSource = Math.ceil((sourcePorts - singleSourcePorts) / sources);
    const many = await flooder.call('udpFlood', `${net}1`, 5300, addrs, perSource, 10_000, 100);
    await sleep(500);
    const m = await daemon.metrics();
    const afterMany = m.get(SESSIONS) ?? 0;
    const rssAfter = daemon.rss();
    const refused = m.get('userspace_proxy_refused_total') ?? 0;
    ctx.log(`udp-flood: ${many.sent} more sent, sessions ${afterMany}, rss ${rssAfter}`);
    // The sessions end after the idle timeout and the memory comes back.
    const drained = await until(
      async () => ((await daemon.metrics()).get(SESSIONS) ?? 0) === 0,
      idleS * 2000 + 5000,
    );
    sampling = false;
    await sampler;
    const rssDrained = daemon.rss();
    const served = await udpAsk(`${net}52`, `${net}1`, 5300, 3000);
    const total = one.sent + many.sent;
    const growth = rssAtCap > 0 ? rssAfter - rssAtCap : Number.NaN;
    const bound = 16 * MIB;
    return {
      id: 'udp-flood',
      title: 'UDP flood from many source ports',
      done:
        `${total} UDP clients, one datagram each from its own source port (a socket bound, used ` +
        `and closed), to one UDP Service port with maxUdpSessionsPerPort ${cap} (per-source share ` +
        `${share}) and udpIdleTimeout ${idleS}s: first ${one.sent} from one address, then ` +
        `${many.sent} from ${sources} addresses. The session gauge was scraped every 250 ms; RSS ` +
        `read from /proc.`,
      figures: [
        {
          name: 'sessions after one address flooded (its share)',
          value: String(afterOne),
          goal: `≤ ${share}`,
          pass: afterOne <= share && afterOne > 0,
        },
        {
          name: 'a second address served while the first held its share',
          value: otherServed ? 'yes' : 'no',
          goal: 'yes',
          pass: otherServed,
        },
        {
          name: 'highest session gauge seen',
          value: String(maxGauge),
          goal: `≤ ${cap} (the cap)`,
          pass: maxGauge <= cap && afterMany <= cap,
        },
        {
          name: 'RSS before / when the cap filled / after the flood / peak',
          value: [rssBefore, rssAtCap, rssAfter, peakRss]
            .map((b) => `${(b / MIB).toFixed(1)} MiB`)
            .join(' / '),
          goal: '—',
        },
        {
          name: 'RSS growth after the cap filled',
          value: Number.isNaN(growth) ? 'cap never filled' : `${(growth / MIB).toFixed(1)} MiB`,
          goal: `< ${bound / MIB} MiB`,
          pass: !Number.isNaN(growth) && growth < bound,
        },
        {
          name: 'sessions ended by the idle timeout; RSS then',
          value: `${drained ? 'all' : 'not all'}; ${(rssDrained / MIB).toFixed(1)} MiB`,
          goal: 'all',
          pass: drained,
        },
        {
          name: 'a new client served after the flood',
          value: served ? 'yes' : 'no',
          goal: 'yes',
          pass: served,
        },
        {
          name: 'datagrams refused (clients over the cap or share)',
          value: String(refused),
          goal: '—',
        },
      ],
      notes:
        one.failed + many.failed > 0
          ? [`${one.failed + many.failed} source ports could not be bound or sent from.`]
          : [],
    };
  } finally {
    sampling = false;
    await sampler;
    flooder.stop();
    await daemon.stop('SIGKILL');
    echo.close();
  }
};
