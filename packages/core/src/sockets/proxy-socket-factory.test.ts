import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidOptionError, SocketOpenError, UnsupportedProtocolError } from '../errors.js';
import { contextFor } from '../test-support/socket-context.js';
import type { ProxySocket } from './proxy-socket.js';
import { createProxySocketFactory, newProxySocket } from './proxy-socket-factory.js';
import { TcpProxySocket } from './proxy-socket-tcp.js';
import { UdpProxySocket } from './proxy-socket-udp.js';

describe('newProxySocket', () => {
  const open: ProxySocket[] = [];
  const track = (socket: ProxySocket): ProxySocket => {
    open.push(socket);
    return socket;
  };

  afterEach(async () => {
    await Promise.all(open.splice(0).map((s) => s.close()));
  });

  it('opens a TCP socket, resolving once listening with the bound port', async () => {
    const socket = track(await newProxySocket(contextFor('TCP', '127.1.3.1', 0)));
    expect(socket).toBeInstanceOf(TcpProxySocket);
    expect(socket.listenPort()).toBe(0);
    const { address, port, family } = socket.addr();
    expect([address, family]).toEqual(['127.1.3.1', 'IPv4']);
    expect(port).toBeGreaterThan(0);
    await new Promise<void>((resolve, reject) => {
      const client = net.connect(port, address, () => {
        client.destroy();
        resolve();
      });
      client.on('error', reject);
    });
  });

  it('opens a UDP socket of the family of its address', async () => {
    const v4 = track(await newProxySocket(contextFor('UDP', '127.1.3.1', 0)));
    expect(v4).toBeInstanceOf(UdpProxySocket);
    expect(v4.addr()).toMatchObject({ address: '127.1.3.1', family: 'IPv4' });
    expect(v4.addr().port).toBeGreaterThan(0);
    const v6 = await newProxySocket(contextFor('UDP', '::1', 0)).catch(() => undefined);
    if (v6 !== undefined) {
      track(v6);
      expect(v6.addr()).toMatchObject({ address: '::1', family: 'IPv6' });
    }
  });

  it('binds every address when the ip is null', async () => {
    const tcp = track(await newProxySocket(contextFor('TCP', null, 0)));
    const udp = track(await newProxySocket(contextFor('UDP', null, 0)));
    expect(['::', '0.0.0.0']).toContain(tcp.addr().address);
    expect(['::', '0.0.0.0']).toContain(udp.addr().address);
  });

  it('matches the protocol case-insensitively, as the reference did', async () => {
    const socket = track(await newProxySocket(contextFor('tcp' as 'TCP', '127.1.3.1', 0)));
    expect(socket).toBeInstanceOf(TcpProxySocket);
  });

  it('refuses SCTP with a pointer to the SCTP package, and unknown protocols', async () => {
    const sctp = await newProxySocket(contextFor('SCTP', '127.1.3.1', 0)).catch((e: unknown) => e);
    expect(sctp).toBeInstanceOf(UnsupportedProtocolError);
    expect((sctp as Error).message).toContain('@userspace-proxy/sctp');
    const other = await newProxySocket(contextFor('QUIC' as 'TCP', '127.1.3.1', 0)).catch(
      (e: unknown) => e,
    );
    expect(other).toBeInstanceOf(UnsupportedProtocolError);
    expect((other as Error).message).toBe('unknown protocol "QUIC"');
  });

  it('reports a taken port as SocketOpenError whose cause is EADDRINUSE', async () => {
    for (const protocol of ['TCP', 'UDP'] as const) {
      const first = track(await newProxySocket(contextFor(protocol, '127.1.3.2', 0)));
      const { port } = first.addr();
      const error = await newProxySocket(contextFor(protocol, '127.1.3.2', port)).catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(SocketOpenError);
      expect((error as SocketOpenError).code).toBe('ERR_SOCKET_OPEN');
      expect((error as Error).message).toContain(`127.1.3.2:${port}/${protocol}`);
      expect(((error as Error).cause as NodeJS.ErrnoException).code).toBe('EADDRINUSE');
    }
  });

  it('rejects an address that is not an IP and a port out of range', async () => {
    await expect(newProxySocket(contextFor('TCP', 'localhost', 0))).rejects.toBeInstanceOf(
      SocketOpenError,
    );
    await expect(newProxySocket(contextFor('UDP', '127.1.3.1', 70_000))).rejects.toThrow(
      /127\.1\.3\.1:70000\/UDP/,
    );
    await expect(newProxySocket(contextFor('TCP', '127.1.3.1', -1))).rejects.toBeInstanceOf(
      SocketOpenError,
    );
  });
});

describe('createProxySocketFactory', () => {
  it('checks its options when it is made', () => {
    expect(() => createProxySocketFactory({ dialTimeoutsMs: [] })).toThrow(InvalidOptionError);
    expect(() => createProxySocketFactory({ dialTimeoutsMs: [250, -1] })).toThrow(/dialTimeoutsMs/);
    expect(() => createProxySocketFactory({ maxConnections: 1.5 })).toThrow(/maxConnections/);
    expect(() => createProxySocketFactory({ maxUdpSessions: 0 })).toThrow(/maxUdpSessions/);
    expect(() => createProxySocketFactory({ halfCloseTimeoutMs: Number.NaN })).toThrow(
      InvalidOptionError,
    );
  });
});
