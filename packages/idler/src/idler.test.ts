import diagnosticsChannel from 'node:diagnostics_channel';
import { RoundRobinLoadBalancer } from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it, vi } from 'vitest';
import { IDLER_CHANNELS, type IdlerReleaseMessage } from './diagnostics.js';
import { HAND_OVER_BATCH, Idler } from './idler.js';
import { IdlerBudget } from './idler-budget.js';
import {
  endpointsOf,
  FakeConnection,
  handedOver,
  RecordingHook,
  RecordingRecorder,
  useIdlerFakeTimers,
} from './test-support/fakes.js';

const servicePort = { namespace: 'ns', name: 'web', port: 'http', protocol: 'TCP' as const };

function setup(options: ConstructorParameters<typeof Idler>[0] = {}) {
  const lb = new RoundRobinLoadBalancer();
  const recorder = new RecordingRecorder();
  const hook = new RecordingHook();
  const idler = new Idler({ recorder, unidleHook: hook, ...options });
  const context = createSocketContext({ loadBalancer: lb, servicePort });
  const policy = idler.acceptPolicy(context);
  const arrive = () => {
    const c = new FakeConnection();
    const verdict = policy.accept(c);
    if (verdict === 'hold') c.hold();
    return { c, verdict };
  };
  const giveEndpoints = () => {
    lb.onEndpointsAdd(endpointsOf('ns', 'web', ['10.0.0.1'], 80, 'http'));
    context.notifyEndpointsChanged();
  };
  return { lb, recorder, hook, idler, context, policy, arrive, giveEndpoints };
}

useIdlerFakeTimers();

describe('the idling accept policy', () => {
  it('holds while the port has no endpoints and hands over oldest first when they come', async () => {
    const s = setup();
    const a = s.arrive();
    const b = s.arrive();
    expect([a.verdict, b.verdict]).toEqual(['hold', 'hold']);
    expect(s.idler.stats().heldByServicePort).toEqual({ 'ns/web:http': 2 });
    const order: FakeConnection[] = [];
    const proxy = FakeConnection.prototype.proxy;
    const spy = vi.spyOn(FakeConnection.prototype, 'proxy').mockImplementation(function (
      this: FakeConnection,
      onDialEnd,
    ) {
      order.push(this);
      return proxy.call(this, onDialEnd);
    });
    s.giveEndpoints();
    await handedOver();
    expect(order).toEqual([a.c, b.c]);
    expect(s.idler.stats()).toMatchObject({ heldNow: 0, handedOver: 2, heldByServicePort: {} });
    expect(a.c.state).toBe('dialling');
    // Arriving while endpoints exist: proxied, not held.
    expect(s.arrive().verdict).toBe('proxy');
    // A hand-over whose dials all failed is counted; one that reached a backend is not.
    a.c.close('10.0.0.1:80');
    b.c.close('');
    expect(s.idler.stats().handOverFailures).toBe(1);
    spy.mockRestore();
  });

  it('asks for pods with a NeedPods Event about the Service and the hook, once per idle period, again every interval', async () => {
    const s = setup({ needPodsIntervalMs: 60_000 });
    s.arrive();
    s.arrive();
    expect(s.recorder.events).toEqual([
      {
        ref: { kind: 'Service', namespace: 'ns', name: 'web' },
        type: 'Normal',
        reason: 'NeedPods',
        message: 'The service-port ns/web:http needs pods.',
      },
    ]);
    expect(s.hook.requests).toHaveLength(1);
    expect(s.hook.requests[0]?.servicePort).toEqual(servicePort);
    const firstSignal = s.hook.requests[0]?.signal;
    vi.advanceTimersByTime(59_999);
    expect(s.recorder.events).toHaveLength(1);
    vi.advanceTimersByTime(1);
    expect(s.recorder.events).toHaveLength(2);
    expect(s.idler.stats().needPodsSent).toBe(2);
    s.giveEndpoints();
    await handedOver();
    expect(firstSignal?.aborted).toBe(true);
    vi.advanceTimersByTime(120_000);
    expect(s.recorder.events).toHaveLength(2);
  });

  it('evicts the oldest beyond maxHeldPerServicePort (17 arrive, 16 held: vector 1)', () => {
    const s = setup();
    const seen: IdlerReleaseMessage[] = [];
    const onRelease = (m: unknown) => seen.push(m as IdlerReleaseMessage);
    diagnosticsChannel.subscribe(IDLER_CHANNELS.release, onRelease);
    try {
      const all = Array.from({ length: 17 }, () => s.arrive());
      expect(all.every((x) => x.verdict === 'hold')).toBe(true);
      expect(all[0]?.c.refusedWith).toBe('hold-evicted');
      expect(all.slice(1).every((x) => x.c.state === 'held')).toBe(true);
      expect(s.idler.stats()).toMatchObject({ heldNow: 16, evictions: 1 });
      expect(seen).toEqual([
        expect.objectContaining({ service: 'ns/web:http', outcome: 'hold-evicted', held: 15 }),
      ]);
    } finally {
      diagnosticsChannel.unsubscribe(IDLER_CHANNELS.release, onRelease);
    }
  });

  it('refuses new clients once the shared budget is spent, across sockets', () => {
    const budget = new IdlerBudget(3);
    const s = setup({ budget });
    const other = new Idler({ budget });
    const lb = new RoundRobinLoadBalancer();
    const policy2 = other.acceptPolicy(
      createSocketContext({ loadBalancer: lb, servicePort: { ...servicePort, name: 'api' } }),
    );
    s.arrive();
    s.arrive();
    expect(policy2.accept(new FakeConnection().hold())).toBe('hold');
    expect(s.arrive().verdict).toBe('refuse');
    expect(s.idler.stats().refusedAtLimit).toBe(1);
    expect(budget.held).toBe(3);
  });

  it('times each client out exactly holdTimeoutMs after it was held (vectors 2 and 3, fixed)', () => {
    const s = setup({ holdTimeoutMs: 120_000 });
    const a = s.arrive();
    vi.advanceTimersByTime(60_000);
    const b = s.arrive();
    vi.advanceTimersByTime(59_999);
    expect(a.c.state).toBe('held');
    vi.advanceTimersByTime(1);
    expect(a.c.refusedWith).toBe('hold-timeout');
    expect(b.c.state).toBe('held');
    // A lone client times out too (the reference kept it while the Service stayed idled).
    vi.advanceTimersByTime(59_999);
    expect(b.c.state).toBe('held');
    vi.advanceTimersByTime(1);
    expect(b.c.refusedWith).toBe('hold-timeout');
    expect(s.idler.stats()).toMatchObject({ timeouts: 2, heldNow: 0, released: 2 });
    expect(s.idler.stats().heldMsTotal).toBe(240_000);
  });

  it('drops a client that closes while held at once and counts it', () => {
    const s = setup();
    const a = s.arrive();
    a.c.close();
    expect(s.idler.stats()).toMatchObject({ heldNow: 0, clientsClosed: 1 });
    expect(s.idler.budget.held).toBe(0);
  });

  it("keeps held clients when the socket closes and hands them over on the hybrid's word", async () => {
    const s = setup();
    const a = s.arrive();
    s.policy.close?.();
    expect(a.c.state).toBe('held');
    expect(s.idler.holds('ns', 'web')).toBe(true);
    s.lb.onEndpointsAdd(endpointsOf('ns', 'web', ['10.0.0.1'], 80, 'http'));
    s.idler.endpointsChanged('ns', 'web');
    await handedOver();
    expect(a.c.proxied).toBe(true);
    expect(s.idler.holds('ns', 'web')).toBe(false);
  });

  it('closes every held client on close and refuses after', () => {
    const s = setup();
    const a = s.arrive();
    s.idler.close();
    expect(a.c.refusedWith).toBe('idler-closed');
    expect(s.policy.accept(new FakeConnection())).toBe('refuse');
  });

  it('rejects bad limits', () => {
    expect(() => new Idler({ maxHeldPerServicePort: 0 })).toThrow(/maxHeldPerServicePort/);
    expect(() => new Idler({ holdTimeoutMs: -1 })).toThrow(/holdTimeoutMs/);
  });
});

describe('the hand-over pacing', () => {
  it('dials at most HAND_OVER_BATCH per event-loop turn, oldest first', async () => {
    const s = setup({ maxHeldPerServicePort: 200 });
    const all = Array.from({ length: HAND_OVER_BATCH + 10 }, () => s.arrive().c);
    s.giveEndpoints();
    await handedOver();
    expect(all.filter((c) => c.proxied)).toHaveLength(HAND_OVER_BATCH);
    expect(all.slice(0, HAND_OVER_BATCH).every((c) => c.proxied)).toBe(true);
    await handedOver();
    expect(all.every((c) => c.proxied)).toBe(true);
  });

  it('keeps at most handOverConcurrency dials in flight; each that ends lets the next start', async () => {
    const s = setup({ maxHeldPerServicePort: 200, handOverConcurrency: 5 });
    const all = Array.from({ length: 12 }, () => s.arrive().c);
    s.giveEndpoints();
    await handedOver();
    await handedOver();
    expect(all.filter((c) => c.proxied)).toHaveLength(5);
    expect(all.slice(0, 5).every((c) => c.proxied)).toBe(true);
    all[0]?.connected();
    all[1]?.close(); // every attempt failed
    await handedOver();
    expect(all.filter((c) => c.proxied)).toHaveLength(7);
    expect(all[5]?.proxied && all[6]?.proxied).toBe(true);
    for (const c of all) if (c.state === 'dialling') c.connected();
    await handedOver();
    for (const c of all) if (c.state === 'dialling') c.connected();
    await handedOver();
    expect(all.every((c) => c.proxied)).toBe(true);
    expect(s.idler.stats()).toMatchObject({ handedOver: 12, handOverFailures: 1, heldNow: 0 });
  });

  it('rejects a handOverConcurrency below 1', () => {
    expect(() => new Idler({ handOverConcurrency: 0 })).toThrow(/handOverConcurrency/);
  });
});
