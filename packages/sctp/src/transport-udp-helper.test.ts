/**
 * `udpIo: 'helper'` beyond the engine suite and the usrsctp interop (both run on it too): what is
 * the helper's own — IPv6, the checksum it checks (bad ones counted and reported as the guard's),
 * a death survived, its exit with its parent, a helper that cannot run, and a fuzz of datagrams
 * sent at it over real UDP.
 */
import { spawn } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { writeSctpChecksum } from './crc32c.js';
import {
  buildUdpHelper,
  createUserspaceSctpEngine,
  type SctpAssociation,
  UserspaceSctpEngine,
  type UserspaceSctpEngineOptions,
} from './index.js';
import { collect, randomLoopback, randomPort } from './test-support/loopback.js';
import { prng, seedFrom } from './test-support/prng.js';
import { HAS_CC } from './test-support/suite-engines.js';

const engines: UserspaceSctpEngine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.close();
});

function engine(o: UserspaceSctpEngineOptions = {}): UserspaceSctpEngine {
  const e = new UserspaceSctpEngine({
    udpIo: 'helper',
    association: { rtoInitial: 200, rtoMin: 100, rtoMax: 400 },
    ...o,
  });
  engines.push(e);
  return e;
}

async function echoPair(
  address: string,
  o: UserspaceSctpEngineOptions = {},
): Promise<{ server: UserspaceSctpEngine; client: SctpAssociation; encapsulationPort: number }> {
  const server = engine(o);
  const encapsulationPort = randomPort();
  const l = await server.listen({ address, port: 5000, encapsulationPort });
  l.on('association', (a) => a.on('message', (m) => a.send(m)));
  const client = await engine().connect({
    address,
    port: 5000,
    encapsulationPort,
    signal: AbortSignal.timeout(5000),
  });
  return { server, client, encapsulationPort };
}

const alive = (pid: number): boolean => existsSync(`/proc/${pid}`);

describe.skipIf(!HAS_CC)("udpIo: 'helper'", () => {
  it('echoes over IPv4 with the datagrams counted by the helper', async () => {
    const { server, client } = await echoPair(randomLoopback());
    const got = collect(client);
    for (let i = 0; i < 200; i++)
      client.send({ streamId: i % 3, ppid: i, data: Buffer.alloc(1 + ((i * 97) % 5000), i) });
    await waitFor(() => got.length === 200, 10_000, 'echoes');
    expect(got.map((m) => m.ppid)).toEqual(Array.from({ length: 200 }, (_, i) => i));
    expect(server.udpIo).toBe('helper');
    const c = server.udpHelperCounters;
    expect(c?.packetsIn).toBeGreaterThan(50);
    expect(c?.packetsOut).toBeGreaterThan(50);
    expect(c?.badChecksums).toBe(0);
    expect(createUserspaceSctpEngine()).toMatchObject({ udpIo: 'node' });
  });

  it('echoes over IPv6', async () => {
    const { client } = await echoPair('::1');
    const got = collect(client);
    client.send({ ppid: 7, data: Buffer.from('over IPv6') });
    await waitFor(() => got.length === 1, 5_000, 'echo');
    expect(got[0]?.data.toString()).toBe('over IPv6');
    expect(client.remoteAddress).toBe('::1');
  });

  it('refuses bad checksums in the helper, counted and reported as the guard does', async () => {
    const warnings: string[] = [];
    const address = randomLoopback();
    const { server, client, encapsulationPort } = await echoPair(address, {
      onWarning: (m) => warnings.push(m),
    });
    const bad = Buffer.alloc(64, 0xab);
    bad.writeUInt16BE(1234, 0);
    bad.writeUInt16BE(5000, 2);
    const short = Buffer.alloc(10, 1);
    const good = Buffer.alloc(16);
    good.writeUInt16BE(1234, 0);
    good.writeUInt16BE(5000, 2);
    good.set([6, 4, 0, 4], 12); // a lone chunk (ABORT, T bit) with a right checksum: out of the blue
    writeSctpChecksum(good);
    const s = createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', r));
    const counters = async () =>
      (await server.endpointCounters()).find((e) => e.port === encapsulationPort)?.counters;
    for (let i = 0; i < 5; i++) s.send(bad, encapsulationPort, address);
    // The first refusal of a second is the one reported: the bad checksums' then.
    await waitFor(
      async () => (await counters())?.refused['bad-checksum'] === 5,
      5_000,
      'bad checksums',
    );
    s.send(short, encapsulationPort, address);
    s.send(good, encapsulationPort, address);
    await waitFor(
      async () => {
        const c = await counters();
        return c?.refused['short-packet'] === 1 && c.outOfTheBlue >= 1 && c;
      },
      5_000,
      'refusals',
    );
    s.close();
    const c = await counters();
    expect(c?.refused['bad-checksum']).toBe(5);
    expect(c?.outOfTheBlue).toBe(1);
    expect(server.udpHelperCounters?.badChecksums).toBe(5);
    expect(warnings.join('\n')).toMatch(/refused: bad-checksum .*first bytes 04d21388abab/);
    // The association is unharmed.
    const got = collect(client);
    client.send({ data: Buffer.from('still here') });
    await waitFor(() => got.length === 1, 5_000, 'echo');
  });

  it('survives the death of its helper: a new one binds the same ports, associations go on', async () => {
    const warnings: string[] = [];
    const { server, client } = await echoPair(randomLoopback(), {
      onWarning: (m) => warnings.push(m),
    });
    const got = collect(client);
    client.send({ data: Buffer.from('before') });
    await waitFor(() => got.length === 1, 5_000, 'first echo');
    const pid = server.udpHelperPid as number;
    process.kill(pid, 'SIGKILL');
    await waitFor(
      () => server.udpHelperPid !== undefined && server.udpHelperPid !== pid,
      10_000,
      'a new helper',
    );
    for (let i = 0; i < 20; i++) client.send({ ppid: i, data: Buffer.alloc(3000, i) });
    await waitFor(() => got.length === 21, 10_000, 'echoes after the restart');
    expect(server.udpHelperCounters).toMatchObject({ deaths: 1, starts: 2 });
    expect(warnings.join('\n')).toMatch(/SCTP UDP helper exited \(SIGKILL\); starting a new one/);
    expect(client.state).toBe('established');
  });

  it('drops datagrams past maxQueuedBytes, counted, and the association recovers them', async () => {
    const address = randomLoopback();
    const server = engine();
    const encapsulationPort = randomPort();
    const l = await server.listen({ address, port: 5000, encapsulationPort });
    l.on('association', (a) => a.on('message', (m) => a.send(m)));
    // A queue towards the helper of 2 000 bytes: a burst of one tick overflows it at once.
    const sender = engine({ udpHelper: { maxQueuedBytes: 2000 } });
    const client = await sender.connect({
      address,
      port: 5000,
      encapsulationPort,
      signal: AbortSignal.timeout(5000),
    });
    const got = collect(client);
    for (let i = 0; i < 40; i++) client.send({ ppid: i, data: Buffer.alloc(3000, i) });
    await waitFor(() => got.length === 40, 20_000, 'every message echoed after retransmission');
    expect(got.map((m) => m.ppid)).toEqual(Array.from({ length: 40 }, (_, i) => i));
    expect(sender.udpHelperCounters?.sendDropped).toBeGreaterThan(0);
    expect(client.state).toBe('established');
  });

  it('backs off while its helper keeps dying soon after each start (20, 40, 80, 160 ms)', async () => {
    const warnings: string[] = [];
    const server = engine({
      onWarning: (m) => warnings.push(m),
      udpHelper: { restartBackoffMs: 20 },
    });
    await server.listen({ address: randomLoopback(), port: 5000, encapsulationPort: randomPort() });
    for (let death = 1; death <= 4; death++) {
      const pid = server.udpHelperPid as number;
      process.kill(pid, 'SIGKILL');
      await waitFor(
        () => server.udpHelperPid !== undefined && server.udpHelperPid !== pid,
        10_000,
        `helper ${death + 1}`,
      );
    }
    const delays = warnings
      .map((w) => /starting a new one in (\d+) ms/.exec(w)?.[1])
      .filter((d) => d !== undefined)
      .map(Number);
    expect(delays).toEqual([20, 40, 80, 160]);
  });

  it('exits when the Node process that started it dies', async () => {
    const path = await buildUdpHelper();
    const parent = spawn(
      process.execPath,
      [
        '-e',
        `const c = require('node:child_process').spawn(${JSON.stringify(path)}, [], { stdio: ['pipe', 'pipe', 'inherit'] });` +
          'c.stdout.once("data", () => console.log(c.pid)); setInterval(() => {}, 1000);',
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    parent.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    await waitFor(() => /^\d+\n/.test(out), 10_000, 'the helper pid');
    const pid = Number(out.trim());
    expect(alive(pid)).toBe(true);
    parent.kill('SIGKILL');
    await waitFor(() => !alive(pid), 10_000, 'the helper gone');
  });

  it('fails a listen clearly when the helper cannot run', async () => {
    const e = engine({ udpHelper: { helperPath: '/nonexistent/sctp-udp-helper' } });
    await expect(
      e.listen({ address: randomLoopback(), port: 5000, encapsulationPort: randomPort() }),
    ).rejects.toMatchObject({ code: 'ERR_SCTP_UDP_HELPER' });
    await expect(e.start()).rejects.toThrow(/cannot run the helper/);
  });

  it('refuses a UDP port already bound, naming the errno', async () => {
    const address = randomLoopback();
    const encapsulationPort = randomPort();
    await engine().listen({ address, port: 5000, encapsulationPort });
    await expect(engine().listen({ address, port: 5000, encapsulationPort })).rejects.toMatchObject(
      { code: 'ERR_SCTP_UDP_SOCKET', errno: 'EADDRINUSE' },
    );
  });

  it('survives a fuzz of datagrams sent at it over UDP', { timeout: 60_000 }, async () => {
    const seed = seedFrom('SCTP_FUZZ_SEED');
    const rand = prng(seed);
    const int = (n: number): number => Math.floor(rand() * n);
    const address = randomLoopback();
    const { server, client, encapsulationPort } = await echoPair(address);
    const s = createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', r));
    const count = Number(process.env.SCTP_UDP_FUZZ_DATAGRAMS ?? 20_000);
    const pid = server.udpHelperPid;
    let sent = 0;
    try {
      for (let i = 0; i < count; i++) {
        const len = int(10) === 0 ? int(16) : int(10) === 0 ? 1 + int(60_000) : 12 + int(1500);
        const b = Buffer.alloc(len);
        for (let j = 0; j + 4 <= len; j += 4) b.writeUInt32LE(int(0x100000000) >>> 0, j);
        if (len >= 16) {
          b.writeUInt16BE(int(3) === 0 ? 5000 : int(65536), 2);
          if (int(2) === 0) writeSctpChecksum(b);
        }
        s.send(b, encapsulationPort, address);
        sent++;
        if (i % 200 === 0) await new Promise((r) => setImmediate(r));
      }
      await waitFor(
        async () => {
          const c = (await server.endpointCounters()).find((e) => e.port === encapsulationPort);
          return (c?.counters.datagramsIn ?? 0) >= sent * 0.5;
        },
        20_000,
        'the fuzz read',
      );
      const c = (await server.endpointCounters()).find((e) => e.port === encapsulationPort);
      expect(c?.counters.exceptions).toBe(0);
      expect(server.udpHelperPid).toBe(pid);
      const got = collect(client);
      client.send({ data: Buffer.from('after the fuzz') });
      await waitFor(() => got.length === 1, 10_000, 'echo');
    } catch (err) {
      console.error(`udp fuzz failed; replay with SCTP_FUZZ_SEED=${seed}`);
      throw err;
    } finally {
      s.close();
    }
  });
});
