import { type Logger, RoundRobinLoadBalancer, type Service } from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it, vi } from 'vitest';
import { Idler } from './idler.js';
import {
  endpointsOf,
  FakeConnection,
  handedOver,
  RecordingHook,
  RecordingRecorder,
  useIdlerFakeTimers,
} from './test-support/fakes.js';

/**
 * The idler against an unlucky cluster, with fake connections and fake timers: clients that give
 * up, endpoints that flap, timeouts racing the hand-over, Services changed or deleted while
 * clients are held.
 */

type Port = { namespace: string; name: string; port: string; protocol: 'TCP' };
const HTTP: Port = { namespace: 'ns', name: 'web', port: 'http', protocol: 'TCP' };
const ADMIN: Port = { namespace: 'ns', name: 'web', port: 'admin', protocol: 'TCP' };

/** A logger that keeps its info lines. */
function recordingLogger(): Logger & { infos: string[] } {
  const infos: string[] = [];
  const none = () => undefined;
  const logger: Logger & { infos: string[] } = {
    infos,
    silly: none,
    trace: none,
    debug: none,
    info: (...args: unknown[]) => infos.push(String(args[0])),
    warn: none,
    error: none,
    fatal: none,
    getSubLogger: () => logger,
  } as unknown as Logger & { infos: string[] };
  return logger;
}

function setup(options: ConstructorParameters<typeof Idler>[0] = {}) {
  const recorder = new RecordingRecorder();
  const hook = new RecordingHook();
  const logger = recordingLogger();
  const idler = new Idler({ recorder, unidleHook: hook, ...options });
  const port = (servicePort: Port) => {
    const lb = new RoundRobinLoadBalancer();
    const context = createSocketContext({ loadBalancer: lb, servicePort, logger });
    const policy = idler.acceptPolicy(context);
    const arrive = () => {
      const c = new FakeConnection();
      const verdict = policy.accept(c);
      if (verdict === 'hold') c.hold();
      return c;
    };
    const setEndpoints = (ips: string[]) => {
      lb.onEndpointsUpdate(
        endpointsOf('ns', servicePort.name, [], 80, servicePort.port),
        endpointsOf('ns', servicePort.name, ips, 80, servicePort.port),
      );
      context.notifyEndpointsChanged();
    };
    return { lb, context, policy, arrive, setEndpoints };
  };
  return { recorder, hook, idler, port, logger };
}

function service(ports: { name: string; protocol?: 'TCP' | 'UDP' }[]): Service {
  return {
    metadata: { namespace: 'ns', name: 'web' },
    spec: { ports: ports.map((p, i) => ({ ...p, port: 8000 + i })) },
  };
}

useIdlerFakeTimers();

describe('NeedPods against clients that give up', () => {
  it('a client that gives up does not abort the request for pods; the endpoints do', async () => {
    const s = setup();
    const http = s.port(HTTP);
    const probe = http.arrive();
    expect(s.hook.requests).toHaveLength(1);
    const signal = s.hook.requests[0]?.signal;
    // A probe with a short timeout: it leaves long before the pods come.
    vi.advanceTimersByTime(1_000);
    probe.close();
    expect(s.idler.stats()).toMatchObject({ heldNow: 0, clientsClosed: 1 });
    expect(signal?.aborted).toBe(false);
    // Nobody held: no repeat.
    vi.advanceTimersByTime(120_000);
    expect(s.hook.requests).toHaveLength(1);
    // Pods came: now the request is moot, although nobody is held.
    http.setEndpoints(['10.0.0.1']);
    await handedOver();
    expect(signal?.aborted).toBe(true);
  });

  it('a second client within the interval after the first gave up does not ask again at once, but at the interval', () => {
    const s = setup({ needPodsIntervalMs: 60_000 });
    const http = s.port(HTTP);
    http.arrive().close();
    vi.advanceTimersByTime(10_000);
    http.arrive();
    expect(s.hook.requests).toHaveLength(1);
    vi.advanceTimersByTime(50_000);
    expect(s.hook.requests).toHaveLength(2);
    // The same request goes on: one signal for both.
    expect(s.hook.requests[1]?.signal).toBe(s.hook.requests[0]?.signal);
  });

  it('held clients whose listener closed (the Service left the idling proxier) ask nobody again', () => {
    const s = setup({ needPodsIntervalMs: 60_000 });
    const http = s.port(HTTP);
    const a = http.arrive();
    http.policy.close?.();
    vi.advanceTimersByTime(60_000);
    expect(s.hook.requests).toHaveLength(1);
    expect(s.recorder.events).toHaveLength(1);
    expect(a.state).toBe('held');
    vi.advanceTimersByTime(60_000);
    expect(a.refusedWith).toBe('hold-timeout');
    expect(s.hook.requests[0]?.signal?.aborted).toBe(true);
  });
});

describe('the idle period in the logs', () => {
  it('probes that come and give up one by one make one idle period: a line at its start, one at its end', async () => {
    const s = setup({ needPodsIntervalMs: 60_000 });
    const http = s.port(HTTP);
    for (let i = 0; i < 30; i++) {
      http.arrive().close();
      vi.advanceTimersByTime(10_000);
    }
    // Asked at the first probe and again each interval in which probes came, not per probe.
    expect(s.hook.requests.length).toBe(5);
    expect(s.logger.infos).toEqual([
      'ns/web:http has no endpoints: holding its clients and asking for pods',
    ]);
    const last = http.arrive();
    http.setEndpoints(['10.0.0.1']);
    await handedOver();
    expect(last.state).toBe('dialling');
    expect(s.logger.infos.slice(1)).toEqual([
      'ns/web:http has endpoints: handing over 1 held client(s)',
      'ns/web:http held clients for 300.0 s: 1 handed-over, 30 client-closed',
    ]);
    // A new period after the pods went again.
    http.setEndpoints([]);
    http.arrive();
    expect(s.logger.infos).toHaveLength(4);
  });

  it('endpoints end a period whose clients have all left, even before its NeedPods was due', async () => {
    const s = setup({ needPodsIntervalMs: 60_000 });
    const http = s.port(HTTP);
    http.arrive().close();
    http.setEndpoints(['10.0.0.1']);
    await handedOver();
    http.setEndpoints([]);
    vi.advanceTimersByTime(10_000);
    // A new period: its NeedPods waits for the interval since the last one.
    http.arrive().close();
    http.setEndpoints(['10.0.0.2']);
    await handedOver();
    expect(s.logger.infos.filter((l) => l.includes('held clients for'))).toEqual([
      'ns/web:http held clients for 0.0 s: 1 client-closed',
      'ns/web:http held clients for 0.0 s: 1 client-closed',
    ]);
    expect(s.hook.requests).toHaveLength(1);
  });
});

describe('endpoints that flap', () => {
  it('endpoints that vanish before the hand-over leave the clients held; they are handed over when they come back', async () => {
    const s = setup();
    const http = s.port(HTTP);
    const a = http.arrive();
    const b = http.arrive();
    http.setEndpoints(['10.0.0.1']);
    await Promise.resolve(); // the hand-over is queued for the next turn
    http.setEndpoints([]);
    await handedOver();
    expect([a.state, b.state]).toEqual(['held', 'held']);
    expect(s.idler.stats()).toMatchObject({ heldNow: 2, handedOver: 0 });
    http.setEndpoints(['10.0.0.2']);
    await handedOver();
    expect([a.state, b.state]).toEqual(['dialling', 'dialling']);
    expect(s.idler.stats()).toMatchObject({ heldNow: 0, handedOver: 2 });
  });

  it('the hold timeout firing while the hand-over is queued ends each client once', async () => {
    const s = setup({ holdTimeoutMs: 120_000 });
    const http = s.port(HTTP);
    const a = http.arrive();
    vi.advanceTimersByTime(119_999);
    const b = http.arrive();
    http.setEndpoints(['10.0.0.1']);
    // The timer runs before the queued hand-over.
    vi.advanceTimersByTime(1);
    expect(a.refusedWith).toBe('hold-timeout');
    await handedOver();
    expect(a.proxied).toBe(false);
    expect(b.state).toBe('dialling');
    expect(s.idler.stats()).toMatchObject({
      timeouts: 1,
      handedOver: 1,
      released: 2,
      heldNow: 0,
    });
    expect(s.idler.budget.held).toBe(0);
    // A client that is dialling is the socket's now: the idler's timeout never touches it.
    vi.advanceTimersByTime(240_000);
    expect(b.state).toBe('dialling');
  });
});

describe('the Service changed or deleted while clients are held', () => {
  it('a removed port refuses its held clients at once; the other ports keep theirs', () => {
    const s = setup();
    const http = s.port(HTTP);
    const admin = s.port(ADMIN);
    const h = http.arrive();
    const a = admin.arrive();
    s.idler.serviceChanged('ns', 'web', service([{ name: 'http' }]));
    expect(a.refusedWith).toBe('service-changed');
    expect(h.state).toBe('held');
    expect(s.idler.stats()).toMatchObject({ heldNow: 1, heldByServicePort: { 'ns/web:http': 1 } });
    expect(s.idler.budget.held).toBe(1);
    // The gone port's request for pods is moot; the remaining one's is not.
    const signals = s.hook.requests.map((r) => [r.servicePort.port, r.signal?.aborted]);
    expect(signals).toEqual([
      ['http', false],
      ['admin', true],
    ]);
  });

  it('a port whose protocol changed refuses its held TCP clients', () => {
    const s = setup();
    const h = s.port(HTTP).arrive();
    s.idler.serviceChanged('ns', 'web', service([{ name: 'http', protocol: 'UDP' }]));
    expect(h.refusedWith).toBe('service-changed');
  });

  it('a deleted Service refuses every held client, asks nobody again, and is forgotten once its sockets close', () => {
    const s = setup({ needPodsIntervalMs: 60_000 });
    const http = s.port(HTTP);
    const held = [http.arrive(), http.arrive()];
    s.idler.serviceChanged('ns', 'web');
    expect(held.map((c) => c.refusedWith)).toEqual(['service-changed', 'service-changed']);
    expect(s.idler.stats()).toMatchObject({ heldNow: 0, released: 2 });
    vi.advanceTimersByTime(600_000);
    expect(s.hook.requests).toHaveLength(1);
    http.policy.close?.();
    expect(s.idler.holds('ns', 'web')).toBe(false);
  });

  it('an update that keeps the port changes nothing', () => {
    const s = setup();
    const h = s.port(HTTP).arrive();
    s.idler.serviceChanged('ns', 'web', service([{ name: 'http' }, { name: 'admin' }]));
    expect(h.state).toBe('held');
    s.idler.serviceChanged('ns', 'other');
    expect(h.state).toBe('held');
  });
});

describe('a full hold queue and the global cap', () => {
  it('evicts the oldest of the port, never a client of another port, and counts each', () => {
    const s = setup({ maxHeldPerServicePort: 2 });
    const http = s.port(HTTP);
    const admin = s.port(ADMIN);
    const other = admin.arrive();
    const [a, b, c, d] = [http.arrive(), http.arrive(), http.arrive(), http.arrive()];
    expect([a?.refusedWith, b?.refusedWith, c?.state, d?.state]).toEqual([
      'hold-evicted',
      'hold-evicted',
      'held',
      'held',
    ]);
    expect(other.state).toBe('held');
    expect(s.idler.stats()).toMatchObject({ evictions: 2, heldNow: 3 });
    expect(s.idler.budget.held).toBe(3);
  });

  it('at the global cap a full port still takes a newcomer by evicting its own oldest', () => {
    const s = setup({ maxHeldPerServicePort: 2, maxHeldTotal: 2 });
    const http = s.port(HTTP);
    const [a, b] = [http.arrive(), http.arrive()];
    const c = http.arrive();
    expect([a.refusedWith, b.state, c.state]).toEqual(['hold-evicted', 'held', 'held']);
    expect(s.port(ADMIN).arrive().refusedWith).toBeUndefined();
    expect(s.idler.stats()).toMatchObject({ refusedAtLimit: 1, heldNow: 2 });
  });
});

describe('many Services idled at once', () => {
  it('holds, asks for and hands over each Service on its own, and forgets each once its socket closed', async () => {
    // Above the 300 dials this test starts (the pacing has its own tests).
    const s = setup({ handOverConcurrency: 1_000 });
    const ports = Array.from({ length: 300 }, (_, i) =>
      s.port({ namespace: 'ns', name: `svc-${i}`, port: 'http', protocol: 'TCP' }),
    );
    const held = ports.map((p) => [p.arrive(), p.arrive()]);
    expect(s.idler.stats().heldNow).toBe(600);
    expect(s.hook.requests).toHaveLength(300);
    expect(s.idler.holds('ns', 'svc-7')).toBe(true);
    // Pods for every other Service only.
    ports.forEach((p, i) => {
      if (i % 2 === 0) p.setEndpoints(['10.0.0.1']);
    });
    for (let turn = 0; turn < 10; turn++) await handedOver();
    held.forEach((pair, i) => {
      expect(pair.map((c) => c.state)).toEqual(
        i % 2 === 0 ? ['dialling', 'dialling'] : ['held', 'held'],
      );
    });
    expect(s.idler.holds('ns', 'svc-0')).toBe(false);
    expect(s.idler.holds('ns', 'svc-1')).toBe(true);
    // Deleted Services: refused, and forgotten once their sockets close.
    for (let i = 1; i < 300; i += 2) s.idler.serviceChanged('ns', `svc-${i}`);
    for (const p of ports) p.policy.close?.();
    expect(s.idler.stats()).toMatchObject({ heldNow: 0, handedOver: 300, released: 600 });
    expect(s.idler.holds('ns', 'svc-1')).toBe(false);
  });
});
