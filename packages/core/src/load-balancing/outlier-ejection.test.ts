import net from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Endpoints } from '../model/model.js';
import { tryConnectEndpoints } from '../sockets/dial-endpoints.js';
import { RoundRobinLoadBalancer } from './load-balancer-round-robin.js';
import { outlierSettings } from './outlier-ejection.js';
import { mulberry32 } from './random.js';

const PORT = { namespace: 'ns', name: 'web', port: 'p' };

function endpoints(...ips: string[]): Endpoints {
  return {
    metadata: { namespace: 'ns', name: 'web' },
    subsets: [{ addresses: ips.map((ip) => ({ ip })), ports: [{ name: 'p', port: 80 }] }],
  };
}

function setup(
  ips: string[],
  options: ConstructorParameters<typeof RoundRobinLoadBalancer>[0] = {},
) {
  let now = 0;
  const lb = new RoundRobinLoadBalancer({ random: mulberry32(7), now: () => now, ...options });
  lb.newService(PORT, 'None', 0);
  lb.onEndpointsAdd(endpoints(...ips));
  const pick = () => lb.nextEndpoint(PORT, null, false);
  const fail = (endpoint: string) => lb.reportDialResult(PORT, endpoint, false);
  return { lb, pick, fail, advance: (ms: number) => (now += ms) };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('outlier ejection in the round-robin balancer', () => {
  it('ejects an endpoint after 3 consecutive failures until its back-off ends, then doubles it', () => {
    const { lb, pick, fail, advance } = setup(['10.0.0.1', '10.0.0.2', '10.0.0.3']);
    const dead = '10.0.0.2:80';
    fail(dead);
    fail(dead);
    expect(lb.ejectedEndpoints(PORT)).toEqual([]);
    fail(dead);
    expect(lb.ejectedEndpoints(PORT)).toEqual([dead]);
    for (let i = 0; i < 30; i++) expect(pick()).not.toBe(dead);
    advance(1_000);
    expect(lb.ejectedEndpoints(PORT)).toEqual([]);
    expect(Array.from({ length: 3 }, pick)).toContain(dead);
    // Still failing on probation: out again, for twice as long.
    fail(dead);
    advance(1_999);
    expect(lb.ejectedEndpoints(PORT)).toEqual([dead]);
    advance(1);
    expect(lb.ejectedEndpoints(PORT)).toEqual([]);
    // A success resets it: the next failure alone does not eject it.
    lb.reportDialResult(PORT, dead, true);
    fail(dead);
    expect(lb.ejectedEndpoints(PORT)).toEqual([]);
  });

  it('caps the back-off at 60 s', () => {
    const { lb, fail, advance } = setup(['10.0.0.1', '10.0.0.2']);
    const dead = '10.0.0.1:80';
    for (let i = 0; i < 3; i++) fail(dead);
    let last = 1_000;
    for (let round = 0; round < 10; round++) {
      advance(last);
      fail(dead);
      last = Math.min(last * 2, 60_000);
    }
    advance(59_999);
    expect(lb.ejectedEndpoints(PORT)).toEqual([dead]);
    advance(1);
    expect(lb.ejectedEndpoints(PORT)).toEqual([]);
  });

  it('never ejects more than half, nor all, of the endpoints', () => {
    const two = setup(['10.0.0.1', '10.0.0.2']);
    for (let i = 0; i < 3; i++) two.fail('10.0.0.1:80');
    for (let i = 0; i < 3; i++) two.fail('10.0.0.2:80');
    expect(two.lb.ejectedEndpoints(PORT)).toEqual(['10.0.0.1:80']);
    const one = setup(['10.0.0.1']);
    for (let i = 0; i < 5; i++) one.fail('10.0.0.1:80');
    expect(one.lb.ejectedEndpoints(PORT)).toEqual([]);
    expect(one.pick()).toBe('10.0.0.1:80');
  });

  it('can be turned off', () => {
    const { lb, fail } = setup(['10.0.0.1', '10.0.0.2', '10.0.0.3'], {
      outlierEjection: { consecutiveFailures: 0 },
    });
    for (let i = 0; i < 10; i++) fail('10.0.0.1:80');
    expect(lb.ejectedEndpoints(PORT)).toEqual([]);
  });

  it('rejects bad options', () => {
    expect(() => outlierSettings({ maxEjectedPercent: 101 })).toThrow(/maxEjectedPercent/);
    expect(() => outlierSettings({ baseEjectionMs: 0 })).toThrow(/baseEjectionMs/);
  });

  it('a retry after a reported failure does not use up the next client’s slot', () => {
    const { lb, pick, fail } = setup(['10.0.0.1', '10.0.0.2', '10.0.0.3']);
    const order = [...lb.endpoints(PORT)];
    expect(pick()).toBe(order[0]);
    fail(order[0] as string);
    // The retry takes the next endpoint, and the next client still gets that slot too.
    expect(lb.nextEndpoint(PORT, null, true)).toBe(order[1]);
    expect(pick()).toBe(order[1]);
    expect(pick()).toBe(order[2]);
  });

  it('a blackholed endpoint stops being dialled after the first few failures (fake timers)', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    const lb = new RoundRobinLoadBalancer({ random: mulberry32(3), now: () => Date.now() });
    lb.newService(PORT, 'None', 0);
    lb.onEndpointsAdd(endpoints('127.1.9.9', '127.1.9.10', '127.1.9.11'));
    const dialled: string[] = [];
    const connect = (target: { host: string; port: number }): net.Socket => {
      dialled.push(`${target.host}:${target.port}`);
      const socket = new net.Socket();
      // The good endpoints connect at once; 127.1.9.9 never does, like a SYN into a black hole.
      if (target.host !== '127.1.9.9') queueMicrotask(() => socket.emit('connect'));
      return socket;
    };
    const client = async () => {
      const dialing = tryConnectEndpoints(PORT, null, 'TCP', lb, { connect });
      await vi.advanceTimersByTimeAsync(250);
      (await dialing).destroy();
    };
    for (let i = 0; i < 9; i++) await client();
    expect(lb.ejectedEndpoints(PORT)).toEqual(['127.1.9.9:80']);
    const before = dialled.length;
    // 20 more clients, well inside the 1 s back-off: none dials the dead endpoint.
    for (let i = 0; i < 20; i++) {
      const dialing = tryConnectEndpoints(PORT, null, 'TCP', lb, { connect });
      await vi.advanceTimersByTimeAsync(0);
      (await dialing).destroy();
    }
    expect(dialled.slice(before)).not.toContain('127.1.9.9:80');
    expect(dialled.length - before).toBe(20);
  });
});
