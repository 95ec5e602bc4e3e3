import { servicePortNameString } from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { type Netns, NetnsSandbox, netnsSupport } from '../../linux/src/test-support/netns.js';
import { writeSctpChecksum } from './crc32c.js';
import type { SctpAssociation, SctpMessage } from './index.js';
import { withSctp } from './proxy-socket-sctp.js';
import { closed, collect, sendAll } from './test-support/loopback.js';
import { prng } from './test-support/prng.js';
import { USRSCTP_DIR, usrsctpMissing } from './test-support/usrsctp.js';
import { createRawSctpEngine, type RawSctpEngine } from './transport-raw.js';
import { RawHelper } from './transport-raw-helper.js';

/**
 * Native SCTP (IP protocol 132) between three network namespaces this file makes, every stack ours
 * over the raw transport, each engine's helper inside its namespace (`ip netns exec`):
 *   client 10.N.1.2 ─veth─ 10.N.1.1 proxy 10.N.2.1 ─veth─ 10.N.2.2 echo
 * The proxy namespace is where nftables drops packets at random. No traffic leaves these namespaces.
 */
const support = netnsSupport(['nft', 'cc']);
const why = support.ok ? '' : ` (skipped: ${support.reason})`;
const N = 200 + Math.floor(Math.random() * 50);
const CLIENT = `10.${N}.1.2`;
const PORTAL = `10.${N}.1.1`;
const PROXY_OUT = `10.${N}.2.1`;
const ECHO = `10.${N}.2.2`;
const PROXY_U = `10.${N}.3.1`;
/** usrsctp's echo_server in raw mode (its own namespace: it owns SCTP there). */
const USRSCTP = `10.${N}.3.2`;
/** An address of the proxy namespace no raw socket is bound to. */
const UNSERVED = `10.${N}.1.3`;
const FAST = { rtoInitial: 100, rtoMin: 100, rtoMax: 1000, sackDelay: 20 };
const servicePort = { namespace: 'ns', name: 'm3ua', port: 'sctp', protocol: 'SCTP' as const };

const usrsctpServicePort = { namespace: 'ns', name: 'echo', port: '', protocol: 'SCTP' as const };

const sandbox = new NetnsSandbox();
let nsClient: Netns;
let nsProxy: Netns;
let nsEcho: Netns;
const engines: RawSctpEngine[] = [];
/**
 * One engine per namespace: a second raw stack on the same address would see the first one's
 * packets as out of the blue and ABORT them (docs/sctp.md, "one SCTP stack per address").
 */
let clientEngine: RawSctpEngine;
let echoEngine: RawSctpEngine;
let proxyEngine: RawSctpEngine;
const stops: Array<() => Promise<void>> = [];
let nsUsrsctp: Netns;
const warnings: string[] = [];

function engineIn(ns: Netns): RawSctpEngine {
  const e = createRawSctpEngine({
    association: FAST,
    helper: { command: ['ip', 'netns', 'exec', ns.name] },
    onWarning: (m) => warnings.push(m),
  });
  engines.push(e);
  return e;
}

/** A counter of `/proc/net/snmp` in `ns` (`Ip` `InUnknownProtos`, `Icmp` `OutDestUnreachs`, ...). */
async function snmp(ns: Netns, group: string, name: string): Promise<number> {
  const text = await ns.exec('cat', ['/proc/net/snmp']);
  const lines = text.split('\n').filter((l) => l.startsWith(`${group}: `));
  const keys = (lines[0] ?? '').split(/\s+/);
  const values = (lines[1] ?? '').split(/\s+/);
  const i = keys.indexOf(name);
  if (i < 0) throw new Error(`no ${group} ${name} in /proc/net/snmp`);
  return Number(values[i]);
}

function messages(count: number) {
  return Array.from({ length: count }, (_, i) => ({
    streamId: i % 3,
    ppid: 3 + (i % 5),
    unordered: i % 11 === 0,
    data: Buffer.from(`${i}:${'x'.repeat((i * 997) % 3000)}`),
  }));
}

/** Every message once; the ordered ones in order per stream. */
function expectDelivered(got: SctpMessage[], sent: ReturnType<typeof messages>): void {
  const id = (m: { data: Buffer }) => Number(m.data.toString().split(':')[0]);
  expect(got.map(id).sort((a, b) => a - b)).toEqual(sent.map(id));
  for (let s = 0; s < 3; s++) {
    const want = sent.filter((m) => m.streamId === s && !m.unordered).map(id);
    expect(got.filter((m) => m.streamId === s && !m.unordered).map(id)).toEqual(want);
  }
  for (const m of got) {
    const o = sent[id(m)];
    expect([m.streamId, m.ppid, m.unordered, m.data.length]).toEqual([
      o?.streamId,
      o?.ppid,
      o?.unordered,
      o?.data.length,
    ]);
  }
}

describe.skipIf(!support.ok)(`raw IP SCTP in network namespaces${why}`, () => {
  beforeAll(async () => {
    nsClient = await sandbox.namespace();
    nsProxy = await sandbox.namespace();
    nsEcho = await sandbox.namespace();
    await sandbox.link(nsClient, nsProxy, { addressA: `${CLIENT}/24`, addressB: `${PORTAL}/24` });
    await sandbox.link(nsProxy, nsEcho, { addressA: `${PROXY_OUT}/24`, addressB: `${ECHO}/24` });
    await nsProxy.exec('ip', ['addr', 'add', `${UNSERVED}/32`, 'dev', 'lo']);
    if (usrsctpMissing === undefined) {
      nsUsrsctp = await sandbox.namespace();
      await sandbox.link(nsProxy, nsUsrsctp, {
        addressA: `${PROXY_U}/24`,
        addressB: `${USRSCTP}/24`,
      });
    }
    await nsClient.exec('ip', ['route', 'add', `${UNSERVED}/32`, 'via', PORTAL]);

    clientEngine = engineIn(nsClient);
    proxyEngine = engineIn(nsProxy);
    echoEngine = engineIn(nsEcho);
    const echo = await echoEngine.listen({ address: ECHO, port: 2905 });
    echo.on('association', (a) => a.on('message', (m) => a.send(m)));

    const lb = new FakeLoadBalancer({
      [servicePortNameString(servicePort)]: [`${ECHO}:2905`],
      [servicePortNameString(usrsctpServicePort)]: [`${USRSCTP}:7`],
    });
    const factory = withSctp(() => Promise.reject(new Error('base factory called')), {
      engine: proxyEngine,
      association: FAST,
    });
    for (const [sp, port] of [
      [servicePort, 2905],
      [usrsctpServicePort, 7],
    ] as const) {
      const ctx = createSocketContext({
        loadBalancer: lb,
        protocol: 'SCTP',
        ip: PORTAL,
        port,
        servicePort: sp,
      });
      const socket = await factory(ctx);
      const loop = socket.proxyLoop(fakeServiceInfo({ protocol: 'SCTP' }));
      stops.push(async () => {
        ctx.abort();
        await socket.close();
        await loop;
      });
    }
  }, 60_000);

  afterAll(async () => {
    for (const stop of stops) await stop();
    for (const e of engines) await e.close();
    await sandbox.cleanup();
  }, 30_000);

  async function roundTrip(count: number): Promise<{ got: SctpMessage[]; a: SctpAssociation }> {
    const a = await clientEngine.connect({
      address: PORTAL,
      port: 2905,
      signal: AbortSignal.timeout(20_000),
    });
    const got = collect(a);
    const sent = messages(count);
    await sendAll(a, sent);
    await waitFor(
      () => got.length >= count || a.closeInfo !== undefined,
      60_000,
      `${count} echoes over raw IP`,
    );
    expect(a.closeInfo).toBeUndefined();
    expectDelivered(got, sent);
    return { got, a };
  }

  it('relays native SCTP client → proxy → echo: every message once, in order per stream, stream/PPID/U kept; graceful shutdown', async () => {
    const unknownBefore = await snmp(nsProxy, 'Ip', 'InUnknownProtos');
    const { a } = await roundTrip(400);
    expect(a.localAddress).toBe(CLIENT);
    const c = closed(a);
    a.shutdown();
    expect((await c).reason).toBe('shutdown');
    // With a raw socket bound to the address, the kernel hands the packets over and answers none of
    // them with ICMP protocol unreachable.
    expect(await snmp(nsProxy, 'Ip', 'InUnknownProtos')).toBe(unknownBefore);
    expect(await snmp(nsEcho, 'Ip', 'InUnknownProtos')).toBe(0);
    const counters = echoEngine.counters;
    expect(counters.packetsIn).toBeGreaterThan(0);
    expect(counters.sendErrors).toBe(0);
    expect(warnings).toEqual([]);
  }, 90_000);

  it('leaves SCTP to an address no raw socket is bound to for the kernel, which answers ICMP protocol unreachable (no rule needed; this stack reads no ICMP, its INIT timer fails the connect)', async () => {
    const before = await snmp(nsProxy, 'Ip', 'InUnknownProtos');
    const unreachBefore = await snmp(nsProxy, 'Icmp', 'OutDestUnreachs');
    const connect = clientEngine.connect({
      address: UNSERVED,
      port: 2905,
      association: { maxInitRetransmits: 1 },
    });
    await expect(connect).rejects.toMatchObject({
      code: 'ERR_SCTP_CONNECT',
    });
    expect(await snmp(nsProxy, 'Ip', 'InUnknownProtos')).toBeGreaterThan(before);
    expect(await snmp(nsProxy, 'Icmp', 'OutDestUnreachs')).toBeGreaterThan(unreachBefore);
  }, 30_000);

  it('refuses crafted packets in the guard before the engine (bad CRC32c, chunk lengths past the packet, random chunks) and keeps relaying', async () => {
    const rnd = prng(0x5c7b);
    // A sender of raw packets in the client namespace: the helper alone, its socket unbound (it
    // reads nothing: the copies of the client engine's packets it gets are dropped).
    const sender = await RawHelper.start({ command: ['ip', 'netns', 'exec', nsClient.name] });
    try {
      const raw = await sender.open('0.0.0.0', () => undefined);
      const packet = (len: number, fixCrc: boolean): Buffer => {
        const b = Buffer.alloc(len);
        for (let i = 0; i < len; i++) b[i] = Math.floor(rnd() * 256);
        b.writeUInt16BE(40_000 + Math.floor(rnd() * 1000), 0);
        b.writeUInt16BE(2905, 2);
        if (fixCrc) writeSctpChecksum(b);
        return b;
      };
      for (let i = 0; i < 300; i++) raw.send(packet(12 + Math.floor(rnd() * 400), false), PORTAL);
      for (let i = 0; i < 300; i++) {
        const b = packet(16 + 4 * Math.floor(rnd() * 60), false);
        b.writeUInt16BE(b.length, 14); // the first chunk's length: the whole packet and beyond
        if (i % 2 === 0) b.writeUInt16BE(b.length + 4, 14);
        writeSctpChecksum(b);
        raw.send(b, PORTAL);
      }
      for (let i = 0; i < 300; i++) raw.send(packet(12 + Math.floor(rnd() * 400), true), PORTAL);
      const portal = async () =>
        (await proxyEngine.endpointCounters()).find((e) => e.address === PORTAL)?.counters;
      await waitFor(
        async () => ((await portal())?.datagramsIn ?? 0) >= 900,
        20_000,
        'the crafted packets at the portal',
      );
      const c = await portal();
      // Random bytes fail the checksum (or are too short to carry a chunk); fixed checksums with
      // a chunk running past the packet fail the bounds; the random chunks that pass the guard are
      // out-of-the-blue packets the endpoint answers or drops without an exception.
      const refused = c?.refused ?? {};
      expect(
        (refused['bad-checksum'] ?? 0) + (refused['short-packet'] ?? 0),
      ).toBeGreaterThanOrEqual(300);
      expect(c?.refused['bad-chunk-length']).toBeGreaterThan(0);
      expect(c?.exceptions).toBe(0);
      raw.close();
    } finally {
      sender.close();
    }
    const { a } = await roundTrip(50);
    const done = closed(a);
    a.shutdown();
    expect((await done).reason).toBe('shutdown');
  }, 60_000);

  it('still delivers everything with 5 % of SCTP packets dropped at random by nftables both ways at the proxy', async () => {
    const rules = [
      'add table inet sctploss',
      'add chain inet sctploss in { type filter hook input priority 0 ; }',
      'add chain inet sctploss out { type filter hook output priority 0 ; }',
      'add rule inet sctploss in meta l4proto sctp numgen random mod 100 < 5 counter drop',
      'add rule inet sctploss out meta l4proto sctp numgen random mod 100 < 5 counter drop',
    ];
    for (const r of rules) await nsProxy.exec('nft', r.split(' '));
    try {
      const { a } = await roundTrip(300);
      const c = closed(a);
      a.shutdown();
      // A lost SHUTDOWN COMPLETE still ends the association (T2 gives up as `shutdown`).
      expect((await c).reason).toBe('shutdown');
      const listing = await nsProxy.exec('nft', ['list', 'table', 'inet', 'sctploss']);
      const drops = [...listing.matchAll(/packets (\d+)/g)].map((m) => Number(m[1]));
      expect(drops.reduce((x, y) => x + y, 0)).toBeGreaterThan(0);
    } finally {
      await nsProxy.exec('nft', ['delete', 'table', 'inet', 'sctploss']);
    }
  }, 120_000);

  it('fails the association in bounded time when nftables drops every SCTP packet', async () => {
    const a = await clientEngine.connect({ address: PORTAL, port: 2905 });
    await nsProxy.exec('nft', ['add', 'table', 'inet', 'sctpall']);
    await nsProxy.exec(
      'nft',
      'add chain inet sctpall in { type filter hook input priority 0 ; policy accept ; }'.split(
        ' ',
      ),
    );
    await nsProxy.exec('nft', 'add rule inet sctpall in meta l4proto sctp drop'.split(' '));
    try {
      const c = closed(a);
      const started = Date.now();
      a.send({ streamId: 0, data: Buffer.from('into the void') });
      expect((await c).reason).toBe('timeout');
      expect(Date.now() - started).toBeLessThan(20_000);
    } finally {
      await nsProxy.exec('nft', ['delete', 'table', 'inet', 'sctpall']);
    }
  }, 40_000);

  it.skipIf(usrsctpMissing !== undefined)(
    `relays to usrsctp's echo_server running raw (native SCTP, not UDP) through the proxy${usrsctpMissing ? ` (skipped: ${usrsctpMissing})` : ''}`,
    async () => {
      // No arguments: no UDP encapsulation port, so usrsctp opens raw IPv4/IPv6 SCTP sockets.
      const server = sandbox.spawnIn(nsUsrsctp, [`${USRSCTP_DIR}/echo_server`]);
      server.stdout?.resume();
      server.stderr?.resume();
      let a: SctpAssociation | undefined;
      // echo_server prints nothing until exit (a pipe): retry until its listener is up.
      await waitFor(
        async () => {
          const c = await clientEngine
            .connect({ address: PORTAL, port: 7, signal: AbortSignal.timeout(3_000) })
            .catch(() => undefined);
          if (c === undefined) return false;
          const ok = await new Promise<boolean>((resolve) => {
            const t = setTimeout(() => resolve(false), 1_000);
            c.once('message', () => {
              clearTimeout(t);
              resolve(true);
            });
            c.once('close', () => resolve(false));
            c.send({ streamId: 0, ppid: 1, data: Buffer.from('ping') });
          });
          if (ok) a = c;
          else c.abort();
          return ok;
        },
        30_000,
        'usrsctp echo_server answering through the proxy',
      );
      const assoc = a as SctpAssociation;
      const got = collect(assoc);
      const sent = messages(150);
      await sendAll(assoc, sent);
      await waitFor(() => got.length >= 150 || assoc.closeInfo !== undefined, 30_000, 'echoes');
      expectDelivered(got, sent);
      const c = closed(assoc);
      assoc.shutdown();
      expect((await c).reason).toBe('shutdown');
    },
    60_000,
  );

  it('refuses without root with ERR_SCTP_RAW_PERMISSION (the helper run as nobody)', async () => {
    const e = createRawSctpEngine({
      helper: {
        command: ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--inh-caps=-all'],
      },
    });
    engines.push(e);
    await expect(e.listen({ address: PORTAL, port: 1 })).rejects.toMatchObject({
      code: 'ERR_SCTP_RAW_PERMISSION',
    });
  }, 30_000);

  it('refuses a listen on an address that is not local with ERR_SCTP_RAW_SOCKET (EADDRNOTAVAIL)', async () => {
    await expect(echoEngine.listen({ address: '192.0.2.77', port: 9 })).rejects.toMatchObject({
      code: 'ERR_SCTP_RAW_SOCKET',
      errno: 'EADDRNOTAVAIL',
    });
  }, 30_000);
});
