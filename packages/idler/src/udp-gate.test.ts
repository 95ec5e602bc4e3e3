import type dgram from 'node:dgram';
import { RoundRobinLoadBalancer } from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { describe, expect, it, vi } from 'vitest';
import { Idler } from './idler.js';
import { endpointsOf, RecordingRecorder, useIdlerFakeTimers } from './test-support/fakes.js';

useIdlerFakeTimers();

const rinfo: dgram.RemoteInfo = { address: '127.0.0.9', port: 5353, family: 'IPv4', size: 1 };

/** The gate of a UDP Service port with no endpoints, with one listener attached. */
function attachedGate(idler: Idler) {
  const context = createSocketContext({
    loadBalancer: new RoundRobinLoadBalancer(),
    protocol: 'UDP',
    servicePort: { namespace: 'ns', name: 'dns', port: 'dns', protocol: 'UDP' },
  });
  const gate = idler.udpGate(context);
  gate.attach(context);
  return { context, gate };
}

describe('the UDP gate', () => {
  it('asks for pods once for a steady stream and again after a gap of udpBurstGapMs (vector 4)', () => {
    const recorder = new RecordingRecorder();
    const idler = new Idler({ recorder });
    const { gate } = attachedGate(idler);
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

  it('buffers the first datagrams within both caps, replays them in arrival order with each client, skips stale ones, and counts every drop', () => {
    const idler = new Idler({ udpBufferDatagrams: 4, udpBufferBytes: 10, holdTimeoutMs: 60_000 });
    const lb = new RoundRobinLoadBalancer();
    const servicePort = { namespace: 'ns', name: 'dns', port: 'dns', protocol: 'UDP' as const };
    const context = createSocketContext({ loadBalancer: lb, protocol: 'UDP', servicePort });
    const gate = idler.udpGate(context);
    gate.attach(context);
    const delivered: string[] = [];
    const socket = {
      deliver: (d: Buffer, r: dgram.RemoteInfo) => delivered.push(`${r.port}:${d.toString()}`),
    };
    const from = (port: number): dgram.RemoteInfo => ({ ...rinfo, port });
    gate.admit(socket, Buffer.from('old'), from(1)); // 3 bytes, stale by the replay
    vi.advanceTimersByTime(30_000);
    gate.admit(socket, Buffer.from('a1'), from(1));
    gate.admit(socket, Buffer.from('toolarge!!'), from(2)); // would pass the byte cap: dropped
    gate.admit(socket, Buffer.from('b1'), from(2));
    gate.admit(socket, Buffer.from('a2'), from(1)); // 4th: the buffer is full by count
    gate.admit(socket, Buffer.from('b2'), from(2)); // dropped
    expect(idler.stats()).toMatchObject({ udpBuffered: 4, udpDropped: 2 });
    vi.advanceTimersByTime(30_001);
    lb.onEndpointsAdd(endpointsOf('ns', 'dns', ['10.0.0.1'], 53, 'dns', 'UDP'));
    context.notifyEndpointsChanged();
    expect(delivered).toEqual(['1:a1', '2:b1', '1:a2']);
    expect(idler.stats()).toMatchObject({ udpReplayed: 3, udpDropped: 3 });
    // With endpoints the gate lets everything through.
    expect(gate.admit(socket, Buffer.from('live'), from(3))).toBe(true);
  });

  it('a listener that closes with buffered datagrams counts them as dropped', () => {
    const idler = new Idler({ udpBufferDatagrams: 8 });
    const { context, gate } = attachedGate(idler);
    const socket = { deliver: vi.fn() };
    for (let i = 0; i < 3; i++) gate.admit(socket, Buffer.from('q'), rinfo);
    gate.detach(context, socket);
    expect(idler.stats()).toMatchObject({ udpBuffered: 3, udpDropped: 3, udpReplayed: 0 });
  });
});
