import type dgram from 'node:dgram';
import { RoundRobinLoadBalancer } from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Idler } from './idler.js';
import { RecordingRecorder } from './test-support/fakes.js';

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance', 'Date'] });
});
afterEach(() => {
  vi.useRealTimers();
});

const rinfo: dgram.RemoteInfo = { address: '127.0.0.9', port: 5353, family: 'IPv4', size: 1 };

describe('the UDP gate', () => {
  it('asks for pods once for a steady stream and again after a gap of udpBurstGapMs (vector 4)', () => {
    const recorder = new RecordingRecorder();
    const idler = new Idler({ recorder });
    const context = createSocketContext({
      loadBalancer: new RoundRobinLoadBalancer(),
      protocol: 'UDP',
      servicePort: { namespace: 'ns', name: 'dns', port: 'dns', protocol: 'UDP' },
    });
    const gate = idler.udpGate(context);
    gate.attach(context);
    const socket = { deliver: vi.fn() };
    for (let s = 0; s < 600; s++) {
      expect(gate.admit(socket, Buffer.from('q'), rinfo)).toBe(false);
      vi.advanceTimersByTime(1000);
    }
    expect(recorder.events).toHaveLength(1);
    vi.advanceTimersByTime(120_000);
    gate.admit(socket, Buffer.from('q'), rinfo);
    expect(recorder.events).toHaveLength(2);
    expect(recorder.events[1]?.message).toBe('The service-port ns/dns:dns needs pods.');
    expect(idler.stats().udpDropped).toBe(601);
    expect(socket.deliver).not.toHaveBeenCalled();
  });
});
