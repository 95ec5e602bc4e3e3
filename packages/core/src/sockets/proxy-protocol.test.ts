import type net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { Service } from '../model/model.js';
import { PROXY_PROTOCOL_ANNOTATION } from '../model/proxy-protocol-annotation.js';
import { validateService } from '../model/validation.js';
import { FakeLoadBalancer } from '../test-support/fake-load-balancer.js';
import { connectTcp, readBytes } from '../test-support/net-clients.js';
import {
  type ParsedProxyHeader,
  parseProxyHeader,
  startProxyProtocolServer,
} from '../test-support/proxy-protocol-server.js';
import { spyLogger } from '../test-support/spy-logger.js';
import { waitFor } from '../test-support/wait-for.js';
import type { AcceptedConnection } from './accept-policy.js';
import {
  encodeProxyHeader,
  encodeProxyV1,
  encodeProxyV2,
  PROXY_V2_SIGNATURE,
  proxyHeaderWriter,
} from './proxy-protocol.js';
import { TcpProxySocket } from './proxy-socket-tcp.js';
import { createServiceInfo, createSocketContext } from './socket-context.js';

const hex = (b: Buffer) => b.toString('hex');
const SIG = '0d0a0d0a000d0a515549540a';

describe('PROXY protocol v1 (known answers from the spec)', () => {
  it('writes TCP4 as the spec example', () => {
    const header = encodeProxyV1(
      { address: '192.168.0.1', port: 56324 },
      { address: '192.168.0.11', port: 443 },
    );
    expect(header.toString('latin1')).toBe('PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n');
  });

  it('writes TCP6, and IPv4-mapped addresses as TCP4 when both ends are IPv4', () => {
    expect(
      encodeProxyV1({ address: '::1', port: 1 }, { address: '::1', port: 65535 }).toString(),
    ).toBe('PROXY TCP6 ::1 ::1 1 65535\r\n');
    expect(
      encodeProxyV1(
        { address: '::ffff:10.1.2.3', port: 5 },
        { address: '::FFFF:10.0.0.1', port: 80 },
      ).toString(),
    ).toBe('PROXY TCP4 10.1.2.3 10.0.0.1 5 80\r\n');
    // One IPv4 and one IPv6 end: both as IPv6.
    expect(
      encodeProxyV1({ address: '10.1.2.3', port: 5 }, { address: 'fd00::1', port: 80 }).toString(),
    ).toBe('PROXY TCP6 ::ffff:10.1.2.3 fd00::1 5 80\r\n');
  });

  it('writes UNKNOWN when an address or port is not known', () => {
    for (const [src, dst] of [
      [
        { address: '', port: 0 },
        { address: '10.0.0.1', port: 80 },
      ],
      [
        { address: '10.0.0.2', port: 1 },
        { address: '10.0.0.1', port: -1 },
      ],
      [
        { address: 'localhost', port: 1 },
        { address: '10.0.0.1', port: 80 },
      ],
    ] as const) {
      expect(encodeProxyV1(src, dst).toString()).toBe('PROXY UNKNOWN\r\n');
    }
  });

  it('never exceeds the spec maximum of 107 bytes', () => {
    const longest = 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff';
    const h = encodeProxyV1({ address: longest, port: 65535 }, { address: longest, port: 65535 });
    expect(h.length).toBe(104);
  });
});

describe('PROXY protocol v2 (known answers from the spec byte layouts)', () => {
  it('writes TCP over IPv4: signature, 0x21, 0x11, length 12, addresses, ports', () => {
    const header = encodeProxyV2(
      { address: '192.168.0.1', port: 56324 },
      { address: '192.168.0.11', port: 443 },
    );
    expect(hex(header)).toBe(`${SIG}2111000c` + 'c0a80001' + 'c0a8000b' + 'dc04' + '01bb');
    expect(header.subarray(0, 12).equals(PROXY_V2_SIGNATURE)).toBe(true);
  });

  it('writes TCP over IPv6: 0x21, 0x21, length 36, 16-byte addresses', () => {
    const header = encodeProxyV2({ address: '2001:db8::1', port: 1 }, { address: '::1', port: 2 });
    expect(hex(header)).toBe(
      `${SIG}21210024` +
        '20010db8000000000000000000000001' +
        '00000000000000000000000000000001' +
        '0001' +
        '0002',
    );
  });

  it('expands every IPv6 form: full, compressed in the middle, embedded IPv4, zone', () => {
    const dst = { address: '1:2:3:4:5:6:7:8', port: 9 };
    const body = (src: string) => hex(encodeProxyV2({ address: src, port: 1 }, dst)).slice(32, 64);
    expect(body('1:2:3:4:5:6:7:8')).toBe('00010002000300040005000600070008');
    expect(body('fe80::1:2%eth0')).toBe('fe800000000000000000000000010002');
    expect(body('64:ff9b::192.0.2.33')).toBe('0064ff9b0000000000000000c0000221');
    expect(body('::')).toBe('00000000000000000000000000000000');
    expect(body('1::')).toBe('00010000000000000000000000000000');
    // An IPv4 source with an IPv6 destination: IPv4-mapped.
    expect(body('10.1.2.3')).toBe('00000000000000000000ffff0a010203');
  });

  it('writes UNSPEC with no addresses when one is unknown', () => {
    const header = encodeProxyV2({ address: '', port: 0 }, { address: '10.0.0.1', port: 80 });
    expect(hex(header)).toBe(`${SIG}21000000`);
  });

  it('round-trips through the test backend parser', () => {
    const cases = [
      [
        { address: '127.0.0.1', port: 40000 },
        { address: '127.9.9.9', port: 80 },
      ],
      [
        { address: '::1', port: 40001 },
        { address: '::1', port: 443 },
      ],
      [
        { address: 'fd00:1::abcd', port: 1 },
        { address: '2001:db8::', port: 2 },
      ],
    ] as const;
    for (const [src, dst] of cases) {
      for (const version of ['v1', 'v2'] as const) {
        const parsed = parseProxyHeader(encodeProxyHeader(version, src, dst));
        if (parsed === 'more' || parsed instanceof Error) throw new Error(String(parsed));
        expect(parsed.header.src).toEqual(src);
        expect(parsed.header.dst).toEqual(dst);
      }
    }
  });
});

describe('the proxy-protocol annotation', () => {
  const svc = (value: unknown): unknown => ({
    metadata: { name: 'a', namespace: 'ns', annotations: { [PROXY_PROTOCOL_ANNOTATION]: value } },
    spec: { clusterIP: '10.0.0.1', ports: [{ port: 80 }] },
  });

  it('accepts v1 and v2 and refuses anything else with the field path', () => {
    expect(validateService(svc('v1')).ok).toBe(true);
    expect(validateService(svc('v2')).ok).toBe(true);
    for (const bad of ['V2', 'v3', '', 'v1 ']) {
      const result = validateService(svc(bad));
      expect(result.ok).toBe(false);
      if (!result.ok) {
        expect(result.error.reason).toContain(
          'metadata.annotations["userspace-proxy.io/proxy-protocol"]: must be one of v1, v2, got',
        );
      }
    }
  });

  it('adds no writer when the annotation is absent, or for UDP; warns for a bad hand-made value', () => {
    const lb = new FakeLoadBalancer();
    const bound = { address: '127.0.0.1', port: 1, family: 'IPv4' as const };
    const log = spyLogger();
    expect(
      proxyHeaderWriter(createSocketContext({ loadBalancer: lb }), bound, log),
    ).toBeUndefined();
    const udp = createSocketContext({
      loadBalancer: lb,
      protocol: 'UDP',
      service: svc('v2') as Service,
    });
    expect(proxyHeaderWriter(udp, bound, log)).toBeUndefined();
    const bad = createSocketContext({ loadBalancer: lb, service: svc('v9') as Service });
    expect(proxyHeaderWriter(bad, bound, log)).toBeUndefined();
    expect(log.warn).toHaveBeenCalledTimes(1);
  });

  it('writes the portal as the destination behind a redirect rule', () => {
    const lb = new FakeLoadBalancer();
    const context = createSocketContext({
      loadBalancer: lb,
      ip: '127.0.0.1',
      port: 0,
      service: svc('v1') as Service,
    });
    const bound = { address: '127.0.0.1', port: 40123, family: 'IPv4' as const };
    const writer = proxyHeaderWriter(context, bound, spyLogger());
    const written: Buffer[] = [];
    const endpoint = { destroyed: false, write: (b: Buffer) => written.push(b) };
    const conn = {
      address: '10.2.0.7',
      port: 5555,
      client: { localAddress: '127.0.0.1', localPort: 40123 },
    };
    const info = createServiceInfo(context, {
      portal: { ip: '10.96.0.10', port: 80, isExternal: false },
    });
    writer?.(conn, endpoint, info);
    // At its own portal, the client socket's local address.
    writer?.(conn, endpoint, createServiceInfo(context));
    expect(written.map((b) => b.toString())).toEqual([
      'PROXY TCP4 10.2.0.7 10.96.0.10 5555 80\r\n',
      'PROXY TCP4 10.2.0.7 127.0.0.1 5555 40123\r\n',
    ]);
  });
});

// --- end to end: a real socket, a backend that parses the header ---

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

const SP = { namespace: 'ns', name: 'pp', port: 'p', protocol: 'TCP' as const };
const KEY = 'ns/pp:p';

function annotated(version: string): Service {
  return {
    metadata: {
      namespace: 'ns',
      name: 'pp',
      annotations: { [PROXY_PROTOCOL_ANNOTATION]: version },
    },
    spec: { ports: [{ name: 'p', port: 80, protocol: 'TCP' }] },
  };
}

async function serve(
  version: string,
  host: string,
  backendHost: string,
  hold?: (c: AcceptedConnection) => void,
) {
  const backend = await startProxyProtocolServer(backendHost);
  cleanup.push(() => backend.close());
  const lb = new FakeLoadBalancer({ [KEY]: [backend.endpoint] });
  const context = createSocketContext({
    loadBalancer: lb,
    ip: host,
    servicePort: SP,
    service: annotated(version),
  });
  const socket = await TcpProxySocket.open(
    context,
    hold === undefined
      ? {}
      : {
          acceptPolicy: () => ({
            accept: (c) => {
              hold(c);
              return 'hold';
            },
          }),
        },
  );
  cleanup.push(() => socket.close());
  void socket.proxyLoop(createServiceInfo(context));
  return { backend, socket };
}

async function client(port: number, host: string): Promise<net.Socket> {
  const c = await connectTcp(port, host);
  c.on('error', () => {});
  cleanup.push(() => c.destroy());
  return c;
}

describe('TcpProxySocket with the PROXY protocol', () => {
  it.each([
    ['v1', '127.0.0.1', 'TCP4'],
    ['v2', '127.0.0.1', 'TCP4'],
    ['v1', '::1', 'TCP6'],
    ['v2', '::1', 'TCP6'],
  ] as const)(
    '%s over %s: the header first, then the client bytes',
    async (version, host, family) => {
      const { backend, socket } = await serve(version, host, host);
      const c = await client(socket.addr().port, host);
      // Bytes sent at once, before the dial can have finished: they must follow the header.
      c.write('early bytes|');
      c.write('more');
      expect((await readBytes(c, 16)).toString()).toBe('early bytes|more');
      const header = backend.headers[0] as ParsedProxyHeader;
      expect(header).not.toBeInstanceOf(Error);
      expect(header.version).toBe(version === 'v1' ? 1 : 2);
      expect(header.family).toBe(family);
      expect(header.src).toEqual({ address: c.localAddress, port: c.localPort });
      expect(header.dst).toEqual({ address: host, port: socket.addr().port });
      if (version === 'v2') expect(header.command).toBe('PROXY');
    },
  );

  it('gives a held client the header too, before the bytes it sent while held', async () => {
    const held: AcceptedConnection[] = [];
    const { backend, socket } = await serve('v2', '127.0.0.1', '127.0.0.1', (c) => held.push(c));
    const c = await client(socket.addr().port, '127.0.0.1');
    c.write('sent while held');
    await waitFor(() => held[0]?.heldBytes === 15, 5_000, 'bytes held');
    expect(backend.accepted).toBe(0);
    expect(held[0]?.proxy()).toBe(true);
    c.write('|after');
    expect((await readBytes(c, 21)).toString()).toBe('sent while held|after');
    const header = backend.headers[0] as ParsedProxyHeader;
    expect(header.family).toBe('TCP4');
    expect(header.src).toEqual({ address: '127.0.0.1', port: c.localPort });
  });
});
