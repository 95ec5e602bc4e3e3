/**
 * Interop with an independent stack: usrsctp's echo_server, client and tsctp over RFC 6951 UDP
 * encapsulation on 127.0.0.1, in both directions.
 */

import { servicePortNameString } from '@userspace-proxy/core';
import { createSocketContext } from '@userspace-proxy/core/sockets';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FakeLoadBalancer } from '../../core/src/test-support/fake-load-balancer.js';
import { fakeServiceInfo } from '../../core/src/test-support/fake-service-info.js';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import {
  createSctpProxySocketFactory,
  createUserspaceSctpEngine,
  type SctpAssociation,
  type SctpEngine,
} from './index.js';
import { closed, collect, randomPort, sendAll } from './test-support/loopback.js';
import { HAS_CC } from './test-support/suite-engines.js';
import { killAll, startPeer, usrsctpMissing } from './test-support/usrsctp.js';

const engines: SctpEngine[] = [];
afterEach(async () => {
  killAll();
  for (const e of engines.splice(0)) await e.close();
});

/** Both datagram I/Os (node:dgram, the C helper when a compiler is present) run every test. */
const IOS: readonly ('node' | 'helper')[] = HAS_CC ? ['node', 'helper'] : ['node'];
let io: 'node' | 'helper' = 'node';

function engine(): SctpEngine {
  const e = createUserspaceSctpEngine({
    udpIo: io,
    association: { rtoInitial: 300, rtoMin: 200 },
  });
  engines.push(e);
  return e;
}

/** usrsctp binds its UDP port on every address; ours goes on 127.0.0.1 only. */
function ports(): { theirs: number; ours: number } {
  const theirs = randomPort();
  return { theirs, ours: theirs === 59999 ? 20000 : theirs + 1 };
}

/** Connects, retrying while the freshly started usrsctp program is not yet bound. */
async function connectTo(
  port: number,
  theirs: number,
  ours: number,
  receiveWindow?: number,
): Promise<SctpAssociation> {
  return waitFor(
    () =>
      engine()
        .connect({
          address: '127.0.0.1',
          port,
          encapsulationPort: theirs,
          localAddress: '127.0.0.1',
          localEncapsulationPort: ours,
          association: { maxInitRetransmits: 2, ...(receiveWindow ? { receiveWindow } : {}) },
        })
        .catch(() => undefined),
    10_000,
    'connect to usrsctp',
  );
}

describe.each(IOS)('udpIo: %s', (which) => {
  beforeAll(() => {
    io = which;
  });
  describe.skipIf(usrsctpMissing !== undefined)(
    `interop with usrsctp${usrsctpMissing ? ` (skipped: ${usrsctpMissing})` : ''}`,
    () => {
      it('our client -> echo_server: multi-stream, PPIDs, unordered, fragmented, graceful shutdown', async () => {
        const { theirs, ours } = ports();
        startPeer('echo_server', [String(theirs), String(ours)]);
        const a = await connectTo(7, theirs, ours);
        expect(a.outboundStreams).toBeGreaterThan(4);
        const got = collect(a);
        const msgs = Array.from({ length: 300 }, (_, i) => ({
          streamId: i % 5,
          ppid: 50 + (i % 3),
          unordered: i % 10 === 0,
          // echo_server echoes messages up to its 10240-byte buffer; 9000 bytes is 7 fragments.
          data: Buffer.alloc(i % 50 === 7 ? 9000 : 100 + i, i & 0xff),
        }));
        await sendAll(a, msgs);
        await waitFor(() => got.length === msgs.length, 10_000, 'all echoes');
        for (let s = 0; s < 5; s++) {
          const sent = msgs.filter((m) => m.streamId === s && !m.unordered);
          const back = got.filter((m) => m.streamId === s && !m.unordered);
          expect(back.map((m) => m.data.length)).toEqual(sent.map((m) => m.data.length));
          expect(back.map((m) => m.ppid)).toEqual(sent.map((m) => m.ppid));
        }
        expect(got.filter((m) => m.unordered)).toHaveLength(30);
        expect(new Set(got.map((m) => m.ppid))).toEqual(new Set([50, 51, 52]));
        const c = closed(a);
        a.shutdown();
        expect((await c).reason).toBe('shutdown');
      });

      it('usrsctp client -> our server: echo, then SCTP_SHUTDOWN_COMP seen by usrsctp', async () => {
        const { theirs, ours } = ports();
        const listener = await engine().listen({
          address: '127.0.0.1',
          port: 5001,
          encapsulationPort: ours,
        });
        const serverClosed = new Promise<string>((resolve) =>
          listener.once('association', (a) => {
            a.on('message', (m) =>
              a.send({ streamId: m.streamId, ppid: m.ppid, unordered: m.unordered, data: m.data }),
            );
            a.once('close', (i) => resolve(i.reason));
          }),
        );
        const peer = startPeer(
          'client',
          ['127.0.0.1', '5001', '0', String(theirs), String(ours)],
          true,
        );
        const lines = Array.from({ length: 20 }, (_, i) => `line ${i} ${'x'.repeat(i)}\n`);
        // Its stdout is a pipe, so printf output only shows at exit: send everything, then EOF.
        for (const l of lines) peer.child.stdin?.write(l);
        peer.child.stdin?.end();
        expect(await peer.exited).toBe(0);
        for (const l of lines) expect(peer.stdout).toContain(l);
        expect(peer.stdout).toContain('SCTP_COMM_UP');
        expect(peer.stdout).toContain('SCTP_SHUTDOWN_COMP');
        expect(await serverClosed).toBe('shutdown');
      });

      it('tsctp client -> our server: messages larger than our receive window arrive whole', async () => {
        const { theirs, ours } = ports();
        const listener = await engine().listen({
          address: '127.0.0.1',
          port: 5002,
          encapsulationPort: ours,
          association: { receiveWindow: 32 * 1024 },
        });
        const sizes: number[] = [];
        let reason = '';
        listener.once('association', (a) => {
          a.on('message', (m) => sizes.push(m.data.length));
          a.once('close', (i) => {
            reason = i.reason;
          });
        });
        const peer = startPeer('tsctp', [
          '-E',
          String(theirs),
          '-U',
          String(ours),
          '-p',
          '5002',
          '-l',
          '100000',
          '-n',
          '40',
          '127.0.0.1',
        ]);
        expect(await peer.exited).toBe(0);
        await waitFor(() => reason !== '', 10_000, 'association closed');
        expect(reason).toBe('shutdown');
        expect(sizes).toEqual(Array(40).fill(100000));
      });

      it('our client -> tsctp server: messages larger than usrsctp receive buffer, unordered, graceful shutdown', async () => {
        const { theirs, ours } = ports();
        const peer = startPeer('tsctp', [
          '-E',
          String(theirs),
          '-U',
          String(ours),
          '-p',
          '5003',
          '-R',
          '65536',
        ]);
        const a = await connectTo(5003, theirs, ours);
        const msgs = Array.from({ length: 30 }, (_, i) => ({
          unordered: i % 2 === 0,
          data: Buffer.alloc(150_000, i),
        }));
        await sendAll(a, msgs);
        const c = closed(a);
        a.shutdown();
        expect((await c).reason).toBe('shutdown');
        // tsctp prints "first_length, messages, recv_calls, sum, seconds, throughput, notifications".
        const line = await waitFor(
          () => /^(\d+), (\d+), (\d+), (\d+), /m.exec(peer.stdout),
          10_000,
          'tsctp summary',
        );
        expect(Number(line[1])).toBe(150_000);
        expect(Number(line[2])).toBe(30);
        expect(Number(line[4])).toBe(30 * 150_000);
      });

      it('usrsctp client -> our proxy -> usrsctp echo_server: both ends independent, graceful shutdown', async () => {
        const { theirs: serverPort } = ports();
        const clientPort = serverPort === 20000 ? 59999 : serverPort - 1;
        const proxyPort = randomPort();
        startPeer('echo_server', [String(serverPort), String(proxyPort)]);
        const servicePort = { namespace: 'ns', name: 'echo', port: '', protocol: 'SCTP' as const };
        const lb = new FakeLoadBalancer({ [servicePortNameString(servicePort)]: ['127.0.0.1:7'] });
        // One UDP port for the proxy's both sides: echo_server sends to the port it was given.
        const factory = createSctpProxySocketFactory({
          engine: engine(),
          encapsulationPort: proxyPort,
          endpointEncapsulationPort: serverPort,
        });
        const ctx = createSocketContext({
          loadBalancer: lb,
          protocol: 'SCTP',
          ip: '127.0.0.1',
          port: 5004,
          servicePort,
        });
        const socket = await factory(ctx);
        const loop = socket.proxyLoop(fakeServiceInfo({ protocol: 'SCTP' }));
        try {
          // echo_server must be bound before the first dial (its stdout is buffered: no ready line).
          await new Promise((r) => setTimeout(r, 300));
          const peer = startPeer(
            'client',
            ['127.0.0.1', '5004', '0', String(clientPort), String(proxyPort)],
            true,
          );
          const lines = Array.from({ length: 10 }, (_, i) => `through the proxy ${i}\n`);
          for (const l of lines) peer.child.stdin?.write(l);
          // Echoes are written unbuffered, so wait for them before EOF: SCTP has no half-close, and
          // the client's SHUTDOWN (sent once its data is acknowledged by the proxy) would stop the
          // echoes still on their way back from echo_server.
          await waitFor(() => lines.every((l) => peer.stdout.includes(l)), 10_000, 'echoes');
          peer.child.stdin?.end();
          expect(await peer.exited).toBe(0);
          expect(peer.stdout).toContain('SCTP_SHUTDOWN_COMP');
        } finally {
          ctx.abort();
          await socket.close();
          await loop;
        }
      });
    },
  );
});
