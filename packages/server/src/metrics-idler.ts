import diagnosticsChannel from 'node:diagnostics_channel';
import {
  IDLER_CHANNELS,
  type IdlerHandOverFailedMessage,
  type IdlerHoldMessage,
  type IdlerNeedPodsMessage,
  type IdlerReleaseMessage,
  type IdlerUdpMessage,
} from '@userspace-proxy/idler';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** Hold durations: from a quick hand-over to the 120 s default hold timeout and beyond. */
const HOLD_BUCKETS = [0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300];

/**
 * The idler's metrics (`--idling`), fed by its diagnostics channels: held clients now per Service
 * port, NeedPods asked, hold durations, and each way a hold ends (timeouts, evictions, hand-overs,
 * clients that gave up), hand-overs that failed, and UDP datagrams dropped or replayed. Registered
 * only with idling on, so a daemon without it exports none of these series.
 */
export function subscribeIdlerMetrics(registry: Registry): () => void {
  const labelNames = ['service', 'protocol'] as const;
  const held = new Gauge({
    name: 'userspace_proxy_idler_held_connections',
    help: 'TCP clients an idled Service port holds now',
    labelNames,
    registers: [registry],
  });
  const needPods = new Counter({
    name: 'userspace_proxy_idler_need_pods_total',
    help: 'Times pods were asked for (a NeedPods Event and the unidle hook), per Service port',
    labelNames,
    registers: [registry],
  });
  const holdSeconds = new Histogram({
    name: 'userspace_proxy_idler_hold_duration_seconds',
    help: 'How long held clients waited, per Service port',
    labelNames,
    buckets: HOLD_BUCKETS,
    registers: [registry],
  });
  const released = new Counter({
    name: 'userspace_proxy_idler_released_total',
    help: 'Held clients that stopped being held, per outcome (handed-over, hold-timeout, hold-evicted, client-closed, closed)',
    labelNames: [...labelNames, 'outcome'],
    registers: [registry],
  });
  const handOverFailures = new Counter({
    name: 'userspace_proxy_idler_hand_over_failures_total',
    help: 'Handed-over clients that closed before reaching an endpoint (every dial failed)',
    labelNames,
    registers: [registry],
  });
  const udp = new Counter({
    name: 'userspace_proxy_idler_udp_datagrams_total',
    help: 'UDP datagrams of idled Service ports, per fate (dropped, replayed)',
    labelNames: [...labelNames, 'fate'],
    registers: [registry],
  });
  const handlers: [string, (message: unknown) => void][] = [
    [
      IDLER_CHANNELS.hold,
      (m) => {
        const { service, protocol, held: now } = m as IdlerHoldMessage;
        held.set({ service, protocol }, now);
      },
    ],
    [
      IDLER_CHANNELS.release,
      (m) => {
        const { service, protocol, outcome, heldMs, held: now } = m as IdlerReleaseMessage;
        held.set({ service, protocol }, now);
        holdSeconds.observe({ service, protocol }, heldMs / 1000);
        released.inc({ service, protocol, outcome });
      },
    ],
    [
      IDLER_CHANNELS.handOverFailed,
      (m) => {
        const { service, protocol } = m as IdlerHandOverFailedMessage;
        handOverFailures.inc({ service, protocol });
      },
    ],
    [
      IDLER_CHANNELS.needPods,
      (m) => {
        const { service, protocol } = m as IdlerNeedPodsMessage;
        needPods.inc({ service, protocol });
      },
    ],
    [
      IDLER_CHANNELS.udpDropped,
      (m) => {
        const { service, protocol, datagrams } = m as IdlerUdpMessage;
        udp.inc({ service, protocol, fate: 'dropped' }, datagrams);
      },
    ],
    [
      IDLER_CHANNELS.udpReplayed,
      (m) => {
        const { service, protocol, datagrams } = m as IdlerUdpMessage;
        udp.inc({ service, protocol, fate: 'replayed' }, datagrams);
      },
    ],
  ];
  const subscribed = handlers.map(([name, handler]) => {
    // A metrics bug must never break the path that publishes.
    const guarded = (message: unknown): void => {
      try {
        handler(message);
      } catch {
        // ignored on purpose
      }
    };
    diagnosticsChannel.subscribe(name, guarded);
    return [name, guarded] as const;
  });
  return () => {
    for (const [name, guarded] of subscribed) diagnosticsChannel.unsubscribe(name, guarded);
    for (const name of [
      'userspace_proxy_idler_held_connections',
      'userspace_proxy_idler_need_pods_total',
      'userspace_proxy_idler_hold_duration_seconds',
      'userspace_proxy_idler_released_total',
      'userspace_proxy_idler_hand_over_failures_total',
      'userspace_proxy_idler_udp_datagrams_total',
    ]) {
      registry.removeSingleMetric(name);
    }
  };
}
