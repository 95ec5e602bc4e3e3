import type { NativeTcpCounters, NativeUdpCounters } from '@userspace-proxy/native';
import { Counter, type Registry } from 'prom-client';

/** The counters of the daemon's native factories (`--data-path native`), read at each scrape. */
export interface NativeMetricSources {
  readonly tcp: NativeTcpCounters;
  readonly udp: NativeUdpCounters;
}

/** The metrics {@link registerNativeMetrics} registers (docs/operations.md lists each). */
export const NATIVE_METRIC_NAMES = [
  'userspace_proxy_native_helper_starts_total',
  'userspace_proxy_native_helper_exits_total',
  'userspace_proxy_native_relisten_failures_total',
  'userspace_proxy_native_udp_dropped_total',
] as const;

/** A counter whose values are read from `read` at each scrape (the factories own the counts). */
function readCounter(
  registry: Registry,
  name: string,
  help: string,
  labelNames: readonly string[],
  read: () => Array<[Record<string, string>, number]>,
): Counter {
  return new Counter({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      this.reset();
      for (const [labels, value] of read()) this.inc(labels, value);
    },
  });
}

/**
 * The native helpers' own metrics: helper starts, deaths and listens that failed after a restart
 * per protocol, and the UDP helper's drops while new clients waited (at its session caps, or
 * because a new session's queue or the thread's output to Node was full). Registered only with
 * `--data-path native`; returns the unregister function.
 */
export function registerNativeMetrics(registry: Registry, n: NativeMetricSources): () => void {
  const both = (pick: (c: NativeTcpCounters | NativeUdpCounters) => number) => () =>
    [
      [{ protocol: 'TCP' }, pick(n.tcp)],
      [{ protocol: 'UDP' }, pick(n.udp)],
    ] as Array<[Record<string, string>, number]>;
  const metrics = [
    readCounter(
      registry,
      'userspace_proxy_native_helper_starts_total',
      'Native helper processes started (the first and every restart)',
      ['protocol'],
      both((c) => c.helperStarts),
    ),
    readCounter(
      registry,
      'userspace_proxy_native_helper_exits_total',
      'Native helper processes that died without being asked to',
      ['protocol'],
      both((c) => c.helperExits),
    ),
    readCounter(
      registry,
      'userspace_proxy_native_relisten_failures_total',
      'Listens after a helper restart that failed (the port taken meanwhile), each retry counted',
      ['protocol'],
      both((c) => c.relistenFailures),
    ),
    readCounter(
      registry,
      'userspace_proxy_native_udp_dropped_total',
      'Datagrams of new UDP clients the native helper dropped: session-limit or queue-full',
      ['reason'],
      () => [
        [{ reason: 'session-limit' }, n.udp.droppedAtCap],
        [{ reason: 'queue-full' }, n.udp.droppedQueueFull],
      ],
    ),
  ];
  return () => {
    for (const name of NATIVE_METRIC_NAMES) registry.removeSingleMetric(name);
    metrics.length = 0;
  };
}
