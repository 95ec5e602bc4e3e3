import dgram from 'node:dgram';
import net from 'node:net';
import type {
  AcceptedConnection,
  AcceptedConnectionState,
  ConntrackCleaner,
  Endpoints,
  EventRecorder,
  EventType,
  ObjectReference,
  Protocol,
} from '@userspace-proxy/core';
import { afterEach, beforeEach, vi } from 'vitest';
import type { NeedPodsRequest, UnidleHook } from '../unidle-hook.js';

/** A random loopback address, so parallel runs do not collide. */
export function randomLoopback(): string {
  const byte = () => 1 + Math.floor(Math.random() * 250);
  return `127.${byte()}.${byte()}.${byte()}`;
}

/** An AcceptedConnection without a socket, for policy tests. */
export class FakeConnection implements AcceptedConnection {
  readonly remoteAddress = '127.0.0.1';
  readonly remotePort = 40_000;
  readonly acceptedAt = performance.now();
  state: AcceptedConnectionState = 'new';
  heldBytes = 0;
  endpoint = '';
  refusedWith: string | undefined;
  proxied = false;
  readonly #listeners: ((c: AcceptedConnection) => void)[] = [];

  hold(): this {
    this.state = 'held';
    return this;
  }

  /** `proxy(onDialEnd)`'s callback, until {@link connected} or {@link close} ends the dial. */
  dialEnd: ((connected: boolean) => void) | undefined;

  proxy(onDialEnd?: (connected: boolean) => void): boolean {
    if (this.state !== 'held') return false;
    this.state = 'dialling';
    this.proxied = true;
    this.dialEnd = onDialEnd;
    return true;
  }

  /** The dial reached `endpoint`: relaying. */
  connected(endpoint = '10.0.0.1:80'): void {
    this.endpoint = endpoint;
    this.state = 'relaying';
    this.#endDial(true);
  }

  #endDial(connected: boolean): void {
    const end = this.dialEnd;
    this.dialEnd = undefined;
    end?.(connected);
  }

  refuse(reason = 'policy'): boolean {
    if (this.state === 'closed') return false;
    this.refusedWith = reason;
    this.close();
    return true;
  }

  /** Ends it as a dial or the client would. */
  close(endpoint = ''): void {
    if (this.state === 'closed') return;
    this.endpoint = endpoint;
    this.state = 'closed';
    this.#endDial(endpoint !== '');
    for (const l of this.#listeners.splice(0)) l(this);
  }

  onClose(listener: (c: AcceptedConnection) => void): void {
    if (this.state === 'closed') listener(this);
    else this.#listeners.push(listener);
  }
}

/** Records Events. */
export class RecordingRecorder implements EventRecorder {
  readonly events: { ref: ObjectReference; type: EventType; reason: string; message: string }[] =
    [];
  event(ref: ObjectReference, type: EventType, reason: string, message: string): void {
    this.events.push({ ref, type, reason, message });
  }
}

/** Records NeedPods requests. */
export class RecordingHook implements UnidleHook {
  readonly requests: NeedPodsRequest[] = [];
  needPods(request: NeedPodsRequest): void {
    this.requests.push(request);
  }
}

/** Records conntrack clean-ups. */
export class RecordingConntrack implements ConntrackCleaner {
  readonly cleared: { ip: string; protocol: Protocol }[] = [];
  async clearEntriesForIP(ip: string, protocol: Protocol): Promise<void> {
    this.cleared.push({ ip, protocol });
  }
}

/** An Endpoints object of one port. */
export function endpointsOf(
  namespace: string,
  name: string,
  ips: string[],
  port: number,
  portName = '',
  protocol: Protocol = 'TCP',
): Endpoints {
  return {
    metadata: { namespace, name },
    subsets:
      ips.length === 0
        ? []
        : [{ addresses: ips.map((ip) => ({ ip })), ports: [{ name: portName, port, protocol }] }],
  };
}

/** A TCP backend that records what each connection sent and answers "ok:" + what it got. */
export async function tcpBackend(host: string): Promise<{
  port: number;
  received: string[];
  server: net.Server;
  close(): Promise<void>;
}> {
  const received: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    socket.on('data', (chunk) => {
      received.push(chunk.toString());
      socket.write(`ok:${chunk.toString()}`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    received,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A UDP backend that echoes "ok:" + each datagram. */
export async function udpBackend(
  host: string,
): Promise<{ port: number; received: string[]; close(): void }> {
  const received: string[] = [];
  const socket = dgram.createSocket('udp4');
  socket.on('message', (msg, rinfo) => {
    received.push(msg.toString());
    socket.send(`ok:${msg.toString()}`, rinfo.port, rinfo.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, host, resolve));
  return { port: socket.address().port, received, close: () => socket.close() };
}

/** Connects, resolving once connected; errors are swallowed after that (a reset is expected). */
export function connect(host: string, port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port }, () => {
      socket.removeListener('error', reject);
      socket.on('error', () => {});
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

/** Resolves with everything the socket received once it closed. */
export function closed(socket: net.Socket): Promise<string> {
  return new Promise((resolve) => {
    let data = '';
    socket.on('data', (chunk) => {
      data += chunk.toString();
    });
    if (socket.destroyed) resolve(data);
    socket.on('close', () => resolve(data));
  });
}

/** Resolves with the first `n` bytes received. */
export function firstBytes(socket: net.Socket, n: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let data = '';
    const onData = (chunk: Buffer) => {
      data += chunk.toString();
      if (data.length >= n) {
        socket.removeListener('data', onData);
        resolve(data);
      }
    };
    socket.on('data', onData);
    socket.once('close', () => reject(new Error(`closed after ${JSON.stringify(data)}`)));
  });
}

/** Hand-overs run after the endpoint handler, in batches on the event loop (setImmediate, not faked). */
export async function handedOver(): Promise<void> {
  await Promise.resolve();
  await new Promise((resolve) => setImmediate(resolve));
}

/** Fakes the idler's clocks (timeouts, NeedPods intervals) in every test of the calling file. */
export function useIdlerFakeTimers(): void {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance', 'Date'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });
}
