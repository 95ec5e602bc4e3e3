/**
 * The `sctp` group: 100-byte messages/s and MB/s with 64 KiB messages over one association, direct
 * (our engine to our engine, each in its own process) and through the proxy (SctpProxySocket in a
 * Proxier, as the daemon runs it, in a third process), with usrsctp's tsctp to tsctp as the native
 * anchor (in the notes of the direct column). Goals (issue 11): ≥ 20 000 messages/s and ≥ 50 MB/s
 * through the proxy, proxy/direct ≥ 0.5. With a C compiler the group also runs a second proxy on
 * the C UDP helper (`--sctp-transport udp-helper`, docs/sctp.md "Fourth pass"), its rows named
 * "..., proxy on the UDP helper" and its CPU including the helper's; `SCTP_BENCH_UDP_IO=node` or
 * `helper` runs one proxy only.
 */
import { spawnSync } from 'node:child_process';
import { compare, type Row, type SuiteConfig } from './compare.js';
import type { SctpRun, SctpTarget } from './roles/sctp.js';
import { RoleProcess } from './rpc.js';

/** The message sizes of the group, with how each is reported. */
const SIZES = [
  { size: 100, scenario: 'SCTP 100 B messages, one association', unit: 'msg/s' },
  { size: 64 * 1024, scenario: 'SCTP 64 KiB messages, one association', unit: 'MB/s' },
] as const;

/** Which proxies run: node:dgram's, the C UDP helper's (when `cc` is there), or both (default). */
function proxyIos(): ('node' | 'helper')[] {
  const want = process.env.SCTP_BENCH_UDP_IO;
  if (want === 'node' || want === 'helper') return [want];
  return spawnSync('cc', ['--version']).status === 0 ? ['node', 'helper'] : ['node'];
}

const value = (r: SctpRun, unit: string): number =>
  unit === 'msg/s' ? r.messages / r.seconds : r.bytes / r.seconds / 1e6;

/** Runs the group and appends its rows. */
export async function sctpRows(cfg: SuiteConfig, rows: Row[]): Promise<void> {
  const sink = new RoleProcess('sctp');
  const ios = proxyIos();
  const proxies = ios.map(() => new RoleProcess('sctp', { profiled: true }));
  const load = new RoleProcess('sctp');
  try {
    const direct = await sink.call<SctpTarget>('startSink');
    const ms = cfg.bulkMs;
    for (const [i, io] of ios.entries()) {
      const proxy = proxies[i] as RoleProcess;
      const proxied = await proxy.call<SctpTarget>('startProxy', direct, io);
      for (const { size, scenario, unit } of SIZES) {
        rows.push(
          await compare(
            cfg,
            {
              group: 'sctp',
              scenario: io === 'node' ? scenario : `${scenario}, proxy on the UDP helper`,
              unit,
              higherIsBetter: true,
            },
            ['direct', 'proxy'],
            async (v) => {
              const cpu0 = (await proxy.call<{ cpuSeconds: number }>('stats')).cpuSeconds;
              const r = await load.call<SctpRun>(
                'blast',
                v === 'direct' ? direct : proxied,
                size,
                ms,
              );
              const cpu = (await proxy.call<{ cpuSeconds: number }>('stats')).cpuSeconds - cpu0;
              const extra: Record<string, number> = {
                [unit === 'msg/s' ? 'MB/s' : 'msg/s']:
                  unit === 'msg/s' ? r.bytes / r.seconds / 1e6 : r.messages / r.seconds,
              };
              if (v === 'proxy') {
                extra['proxy CPU %'] = (100 * cpu) / r.seconds;
                // CPU per unit of work: depends far less on how loaded the machine is than the rates.
                if (unit === 'msg/s') extra['proxy CPU µs/msg'] = (1e6 * cpu) / r.messages;
                else extra['proxy CPU ms/MB'] = (1000 * cpu) / (r.bytes / 1e6);
              }
              // The native anchor once per size (with the first proxy's rows).
              if (v === 'direct' && i === 0) {
                const anchor = await load.call<SctpRun | undefined>('tsctp', size, ms);
                if (anchor) extra[`usrsctp tsctp ${unit}`] = value(anchor, unit);
              }
              return { value: value(r, unit), extra };
            },
          ),
        );
      }
    }
    await Promise.all([
      sink.call('stop'),
      ...proxies.map((p) => p.call('stop')),
      load.call('stop'),
    ]);
  } finally {
    sink.stop();
    for (const p of proxies) p.stop();
    load.stop();
  }
}
