import { sleep, startDaemon, until } from './daemon.js';
import { manifest, subnet, tcpStates } from './net.js';
import { PeerProcess } from './peer.js';
import type { Probe } from './types.js';

/** The states a half-closed connection leaves behind: the FIN's sender and its receiver. */
function halfClosed(states: Record<string, number>): number {
  return (states.FIN_WAIT2 ?? 0) + (states.CLOSE_WAIT ?? 0);
}

/**
 * Thousands of half-closed connections: each client sends a FIN and keeps reading, its backend
 * never answers nor closes. After `tcpHalfCloseTimeout` the proxy must have reset both legs of every
 * one, so nothing is left in FIN_WAIT2 or CLOSE_WAIT on either side of it. Clients and backends are
 * separate processes, so each process stays under the machine's descriptor limit (the daemon holds
 * two per connection).
 */
export const halfCloseProbe: Probe = async (ctx) => {
  const { connections, timeoutS } = ctx.sizes.halfClose;
  const net = subnet();
  const backend = new PeerProcess();
  const clients = new PeerProcess();
  const notes: string[] = [];
  try {
    const bport = await backend.call('silentBackend', `${net}10`);
    const daemon = await startDaemon({
      net,
      build: ctx.build,
      services: manifest([
        { name: 'hc', ip: `${net}1`, port: 8080, targetPort: bport, endpoints: [`${net}10`] },
      ]),
      userspaceProxy: { tcpHalfCloseTimeout: `${timeoutS}s` },
    });
    try {
      const ends = [`${net}1:8080`, `${net}10:${bport}`];
      const connected = await clients.call('connect', `${net}1`, 8080, connections, 250);
      await until(async () => (await backend.call('stats')).open >= connected, 60_000);
      const atBackend = (await backend.call('stats')).open;
      const fds = daemon.fds();
      ctx.log(`half-close: ${connected} connected, ${atBackend} at the backend, daemon fds ${fds}`);
      await clients.call('halfClose');
      const t0 = Date.now();
      let peak = 0;
      await until(() => {
        peak = Math.max(peak, halfClosed(tcpStates(ends)));
        return peak >= 4 * connected;
      }, 10_000);
      // Wait out the timeout, then give the daemon a few seconds for its wheel tick and the resets.
      let clearedAt: number | undefined;
      const deadline = t0 + timeoutS * 1000 + 5000;
      while (Date.now() < deadline) {
        const n = halfClosed(tcpStates(ends));
        if (n === 0 && clearedAt === undefined) clearedAt = Date.now();
        if (n === 0) break;
        await sleep(100);
      }
      while (Date.now() < t0 + timeoutS * 1000 + 5000 && clearedAt === undefined) await sleep(100);
      const left = halfClosed(tcpStates(ends));
      const early = clearedAt !== undefined && clearedAt - t0 < timeoutS * 1000 - 200;
      const all = tcpStates(ends);
      // The client process may still be working through thousands of resets.
      await until(async () => (await clients.call('stats')).open === 0, 20_000);
      const cs = await clients.call('stats');
      if (connections >= 9000) {
        notes.push(
          `${connections} connections, not 10 000: this machine's descriptor limit is 20 000 per ` +
            `process (hard) and the daemon holds two per proxied connection (it had ${fds} open).`,
        );
      }
      return {
        id: 'half-close',
        title: 'Half-closed connections',
        done:
          `${connected} TCP connections through one Service port to a backend that reads and never ` +
          `writes or closes (clients and backend in two processes of their own). Each client sent a ` +
          `FIN and kept reading; the daemon ran with tcpHalfCloseTimeout ${timeoutS}s. Sockets of the ` +
          `Service port and of the endpoint were counted by state in /proc/net/tcp (what ss shows).`,
        figures: [
          {
            name: 'sockets in FIN_WAIT2/CLOSE_WAIT at the peak',
            value: `${peak} (${connected} connections × 4 sockets = ${4 * connected})`,
            goal: '—',
          },
          {
            name: 'left in FIN_WAIT2/CLOSE_WAIT 5 s after the half-close timeout',
            value: String(left),
            goal: '0',
            pass: left === 0 && connected === connections && peak >= 4 * connected,
          },
          {
            name: 'time from the FINs until none was left',
            value: clearedAt === undefined ? 'never' : `${((clearedAt - t0) / 1000).toFixed(1)} s`,
            goal: `≥ ${timeoutS} s (not before the timeout)`,
            pass: clearedAt !== undefined && !early,
          },
          {
            name: 'daemon still running',
            value: daemon.alive() ? 'yes' : `no (exit ${await daemon.exited})`,
            goal: 'yes',
            pass: daemon.alive(),
          },
          {
            name: 'clients that saw the reset',
            value: `${cs.reset} of ${connected} (FIN: ${cs.fin}, other: ${cs.other}, still open: ${cs.open})`,
            goal: `${connected}`,
            pass: cs.reset === connected,
          },
          {
            // The backend never reads again after the FIN, so it only learns of the reset from
            // the kernel: its sockets show as CLOSE, held open by the backend process alone.
            name: 'sockets of the port and endpoint afterwards, by state (CLOSE: the backend still holds the descriptor of a reset socket)',
            value: JSON.stringify(all),
            goal: '—',
          },
        ],
        notes: daemon.alive()
          ? notes
          : [
              ...notes,
              `The daemon's last output: ${daemon.log().slice(-1500).replace(/\s+/g, ' ')}`,
            ],
      };
    } finally {
      await daemon.stop('SIGKILL');
    }
  } finally {
    await clients.call('close').catch(() => {});
    await backend.call('close').catch(() => {});
    clients.stop();
    backend.stop();
  }
};
