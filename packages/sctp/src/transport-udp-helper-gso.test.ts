/**
 * UDP GSO / GRO in the UDP helper (`udpIo: 'helper'`, docs/sctp.md "Fifth pass"): bursts of full
 * packets leave in GSO runs and arrive intact and in order, whether the receiver splits GRO reads
 * itself (another helper) or the kernel segments them for it (node:dgram); with GSO and GRO off
 * the same bursts go datagram by datagram; and a kernel that refuses GSO (a loopback whose MTU is
 * below the packet size, in a network namespace of its own) gets every datagram sent without it.
 */
import { createHash } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { type Netns, NetnsSandbox, netnsSupport } from '../../linux/src/test-support/netns.js';
import {
  buildUdpHelper,
  type SctpAssociation,
  type SctpMessage,
  UserspaceSctpEngine,
  type UserspaceSctpEngineOptions,
} from './index.js';
import { randomLoopback, randomPort, sendAll } from './test-support/loopback.js';
import { HAS_CC } from './test-support/suite-engines.js';

const engines: UserspaceSctpEngine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.close();
});

function engine(o: UserspaceSctpEngineOptions = {}): UserspaceSctpEngine {
  const e = new UserspaceSctpEngine({
    association: { rtoInitial: 200, rtoMin: 100, rtoMax: 400 },
    ...o,
  });
  engines.push(e);
  return e;
}

/** `count` messages of 64 KiB on 3 streams, each filled from its index so a mix-up shows. */
function burst(count: number): { streamId: number; ppid: number; data: Buffer }[] {
  return Array.from({ length: count }, (_, i) => {
    const data = Buffer.alloc(64 * 1024);
    for (let j = 0; j < data.length; j += 4) data.writeUInt32BE((i * 65_537 + j) >>> 0, j);
    return { streamId: i % 3, ppid: i, data };
  });
}

const digest = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Every message once, whole, and in order on its stream. */
function expectIntact(got: SctpMessage[], sent: ReturnType<typeof burst>): void {
  expect(got.map((m) => m.ppid).sort((a, b) => a - b)).toEqual(sent.map((m) => m.ppid));
  for (let s = 0; s < 3; s++) {
    const want = sent.filter((m) => m.streamId === s).map((m) => m.ppid);
    expect(got.filter((m) => m.streamId === s).map((m) => m.ppid)).toEqual(want);
  }
  for (const m of got) expect(digest(m.data)).toBe(digest(sent[m.ppid]?.data as Buffer));
}

/** A sink engine listening on `address`, and a sender connected to it. */
async function pair(
  address: string,
  sinkOptions: UserspaceSctpEngineOptions,
  senderOptions: UserspaceSctpEngineOptions,
): Promise<{
  sink: UserspaceSctpEngine;
  sender: UserspaceSctpEngine;
  got: SctpMessage[];
  a: SctpAssociation;
}> {
  const sink = engine(sinkOptions);
  const encapsulationPort = randomPort();
  const l = await sink.listen({ address, port: 5000, encapsulationPort });
  const got: SctpMessage[] = [];
  l.on('association', (a) => a.on('message', (m) => got.push(m)));
  const sender = engine(senderOptions);
  const a = await sender.connect({
    address,
    port: 5000,
    encapsulationPort,
    signal: AbortSignal.timeout(5000),
  });
  return { sink, sender, got, a };
}

describe.skipIf(!HAS_CC)('UDP GSO / GRO in the UDP helper', () => {
  it('sends bursts in GSO runs, received through GRO, every message intact and in order', async () => {
    const { sink, sender, got, a } = await pair(
      randomLoopback(),
      { udpIo: 'helper' },
      { udpIo: 'helper' },
    );
    const sent = burst(64);
    await sendAll(a, sent);
    await waitFor(() => got.length === sent.length, 20_000, 'the burst delivered');
    expectIntact(got, sent);
    const out = sender.udpHelperCounters;
    // 46 packets per message, most of them full: most leave in runs.
    expect(out?.gsoSends).toBeGreaterThan(0);
    expect(out?.gsoSegments).toBeGreaterThan((out?.packetsOut ?? 0) / 2);
    expect(out?.gsoRefused).toBe(0);
    const inn = sink.udpHelperCounters;
    expect(inn?.groReads).toBeGreaterThan(0);
    expect(inn?.groSegments).toBeGreaterThan(inn?.groReads ?? 0);
    expect(inn?.badChecksums).toBe(0);
  });

  it('sends GSO runs to node:dgram, which the kernel splits, every message intact', async () => {
    const { sender, got, a } = await pair(randomLoopback(), {}, { udpIo: 'helper' });
    const sent = burst(32);
    await sendAll(a, sent);
    await waitFor(() => got.length === sent.length, 20_000, 'the burst delivered');
    expectIntact(got, sent);
    expect(sender.udpHelperCounters?.gsoSends).toBeGreaterThan(0);
  });

  it('with gso and gro false, sends and reads datagram by datagram', async () => {
    const off = { udpIo: 'helper', udpHelper: { gso: false, gro: false } } as const;
    const { sink, sender, got, a } = await pair(randomLoopback(), off, off);
    const sent = burst(16);
    await sendAll(a, sent);
    await waitFor(() => got.length === sent.length, 20_000, 'the burst delivered');
    expectIntact(got, sent);
    expect(sender.udpHelperCounters).toMatchObject({ gsoSends: 0, gsoSegments: 0 });
    expect(sink.udpHelperCounters).toMatchObject({ groReads: 0, groSegments: 0 });
  });
});

const support = netnsSupport(['cc']);
const why = support.ok ? '' : ` (skipped: ${support.reason})`;

describe.skipIf(!support.ok)(`a kernel that refuses UDP GSO${why}`, () => {
  const sandbox = new NetnsSandbox();
  const dirs: string[] = [];
  afterAll(async () => {
    await sandbox.cleanup();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  /** A helper path that runs the real helper inside `ns` (`ip netns exec` execs it: same pid). */
  async function helperIn(ns: Netns): Promise<string> {
    const dir = mkdtempSync(join(tmpdir(), 'sctp-gso-'));
    dirs.push(dir);
    const path = join(dir, 'helper');
    writeFileSync(
      path,
      `#!/bin/sh\nexec ip netns exec ${ns.name} ${await buildUdpHelper()} "$@"\n`,
    );
    chmodSync(path, 0o755);
    return path;
  }

  it('is counted and warned about once, and every datagram goes out without GSO', async () => {
    const ns = await sandbox.namespace();
    // 1 400 bytes of MTU under packets of 1 472: a GSO send is refused (EINVAL / EMSGSIZE), a
    // datagram sent alone is fragmented by IP and arrives.
    await ns.exec('ip', ['link', 'set', 'lo', 'mtu', '1400']);
    const helperPath = await helperIn(ns);
    const warnings: string[] = [];
    const { sender, got, a } = await pair(
      '127.0.0.1',
      { udpIo: 'helper', udpHelper: { helperPath } },
      { udpIo: 'helper', udpHelper: { helperPath }, onWarning: (m) => warnings.push(m) },
    );
    const sent = burst(16);
    await sendAll(a, sent);
    await waitFor(() => got.length === sent.length, 30_000, 'the burst delivered');
    expectIntact(got, sent);
    const c = sender.udpHelperCounters;
    expect(c?.gsoRefused).toBeGreaterThan(0);
    // Refused once per socket: the sender's one socket sends without GSO after the first.
    expect(c?.gsoRefused).toBe(1);
    expect(c?.gsoSends).toBe(0);
    expect(c?.sendErrors).toBe(0);
    expect(
      warnings.filter((w) => /refused a UDP GSO send \((EINVAL|EMSGSIZE)\)/.test(w)),
    ).toHaveLength(1);
  });
});
