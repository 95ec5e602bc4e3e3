import { readFile } from 'node:fs/promises';
import type { NativeTcpCounters, NativeUdpCounters } from '@userspace-proxy/native';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { NATIVE_METRIC_NAMES, registerNativeMetrics } from './metrics-native.js';

describe('registerNativeMetrics', () => {
  it("exports the factories' counters as they are at each scrape, and unregisters", async () => {
    const tcp = { helperStarts: 1, helperExits: 0, relistenFailures: 0 } as NativeTcpCounters;
    const udp = {
      helperStarts: 1,
      helperExits: 0,
      relistenFailures: 0,
      droppedAtCap: 0,
      droppedQueueFull: 0,
    } as NativeUdpCounters;
    const registry = new Registry();
    const off = registerNativeMetrics(registry, { tcp, udp });
    udp.helperStarts = 3;
    udp.helperExits = 2;
    tcp.relistenFailures = 4;
    udp.droppedQueueFull = 25;
    const text = await registry.metrics();
    expect(text).toContain('userspace_proxy_native_helper_starts_total{protocol="UDP"} 3');
    expect(text).toContain('userspace_proxy_native_helper_starts_total{protocol="TCP"} 1');
    expect(text).toContain('userspace_proxy_native_helper_exits_total{protocol="UDP"} 2');
    expect(text).toContain('userspace_proxy_native_relisten_failures_total{protocol="TCP"} 4');
    expect(text).toContain('userspace_proxy_native_udp_dropped_total{reason="queue-full"} 25');
    expect(text).toContain('userspace_proxy_native_udp_dropped_total{reason="session-limit"} 0');
    udp.droppedQueueFull = 26;
    expect(await registry.metrics()).toContain(
      'userspace_proxy_native_udp_dropped_total{reason="queue-full"} 26',
    );
    off();
    expect(registry.getMetricsAsArray()).toHaveLength(0);
  });

  it('is documented in docs/operations.md', async () => {
    const docs = await readFile(new URL('../../../docs/operations.md', import.meta.url), 'utf8');
    expect(NATIVE_METRIC_NAMES.filter((n) => !docs.includes(`\`${n}\``))).toEqual([]);
  });
});
