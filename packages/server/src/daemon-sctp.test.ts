import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { noopLogger } from '@userspace-proxy/core';
import { createUserspaceSctpEngine, type SctpMessage } from '@userspace-proxy/sctp';
import { afterEach, describe, expect, it } from 'vitest';
import { defaultConfiguration } from './config-schema.js';
import { Daemon } from './daemon.js';
import { loopbackBlock } from './test-support/loopback.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { until } from './test-support/wait.js';

// Loopback addresses of this file: the Service, its SCTP endpoint, the client, the daemon's servers.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const SERVICE_IP = `${NET}1`;
const ENDPOINT_IP = `${NET}2`;
const CLIENT_IP = `${NET}3`;
const SERVERS_IP = `${NET}4`;
const OTHER_CLIENT_IP = `${NET}5`;
/** RFC 6951 encapsulation port of this test (not 9899, so a test never meets a real peer). */
const ENCAP = 19_899;

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** An SCTP echo endpoint on ENDPOINT_IP:3868 and the daemon serving it on SERVICE_IP:3868. */
async function startDaemonWithEcho(
  tune: (c: ReturnType<typeof defaultConfiguration>) => void = () => {},
  endpointMtu = 1500,
): Promise<void> {
  // The endpoint: an SCTP echo server on ENDPOINT_IP, its SCTP port 3868 (Diameter's).
  const engine = createUserspaceSctpEngine({ association: { mtu: endpointMtu } });
  cleanups.push(() => engine.close());
  const listener = await engine.listen({
    address: ENDPOINT_IP,
    port: 3868,
    encapsulationPort: ENCAP,
  });
  listener.on('association', (association) => {
    association.on('message', (m: SctpMessage) => {
      association.send({
        streamId: m.streamId,
        ppid: m.ppid,
        data: Buffer.concat([Buffer.from('echo:'), m.data]),
      });
    });
  });

  const dir = await mkdtemp(join(tmpdir(), 'up-sctp-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  const manifest = join(dir, 'services.yaml');
  await writeFile(
    manifest,
    serviceWithSlice({
      clusterIP: SERVICE_IP,
      port: 3868,
      portName: 'diameter',
      protocol: 'SCTP',
      endpoints: [{ ip: ENDPOINT_IP, port: 3868 }],
    }),
  );
  const c = defaultConfiguration();
  c.userspaceProxy.servicesFile = manifest;
  c.userspaceProxy.sctpEncapsulationPort = ENCAP;
  c.healthzBindAddress = `${SERVERS_IP}:10256`;
  c.metricsBindAddress = `${SERVERS_IP}:10249`;
  c.iptables.minSyncPeriod = 0;
  tune(c);
  const daemon = new Daemon({ config: c, logger: noopLogger, env: {}, listenRetryMs: 50 });
  cleanups.push(async () => {
    void daemon.stop('test over', { drain: false });
    await daemon.exited;
  });
  await daemon.start();
}

/** A client engine on `localAddress` (its own, closed after the test). */
function clientEngine(mtu = 1500) {
  const client = createUserspaceSctpEngine({ association: { mtu } });
  cleanups.push(() => client.close());
  return client;
}

function connectThrough(client: ReturnType<typeof clientEngine>, localAddress: string) {
  return client.connect({
    address: SERVICE_IP,
    port: 3868,
    encapsulationPort: ENCAP,
    localAddress,
    localEncapsulationPort: ENCAP,
    signal: AbortSignal.timeout(2_000),
  });
}

describe('the daemon with an SCTP Service', () => {
  it('relays SCTP messages (stream, PPID, boundaries) between a client and the endpoint', async () => {
    await startDaemonWithEcho();
    // The client: an association to the Service address, through the daemon.
    const client = clientEngine();
    const received: SctpMessage[] = [];
    await until(async () => {
      try {
        const association = await connectThrough(client, CLIENT_IP);
        association.on('message', (m: SctpMessage) => received.push(m));
        association.send({ streamId: 1, ppid: 46, data: Buffer.from('CER') });
        association.send({ streamId: 0, ppid: 46, data: Buffer.from('DWR') });
        return true;
      } catch {
        return false;
      }
    }, 'an association through the daemon');
    await until(() => received.length === 2, 'both answers');
    const byStream = received
      .map((m) => [m.streamId, m.ppid, m.data.toString()])
      .sort((a, b) => Number(a[0]) - Number(b[0]));
    expect(byStream).toEqual([
      [0, 46, 'echo:DWR'],
      [1, 46, 'echo:CER'],
    ]);
  });

  it.skipIf(spawnSync('cc', ['--version']).status !== 0)(
    'relays through the C UDP helper with --sctp-transport udp-helper',
    async () => {
      await startDaemonWithEcho((c) => {
        c.userspaceProxy.sctpTransport = 'udp-helper';
      });
      const client = clientEngine();
      const received: SctpMessage[] = [];
      const big = Buffer.alloc(30_000, 0x62);
      await until(async () => {
        try {
          const association = await connectThrough(client, CLIENT_IP);
          association.on('message', (m: SctpMessage) => received.push(m));
          association.send({ streamId: 1, ppid: 46, data: Buffer.from('CER') });
          association.send({ ppid: 47, data: big });
          return true;
        } catch {
          return false;
        }
      }, 'an association through the daemon');
      await until(() => received.length === 2, 'both answers');
      expect(received.map((m) => [m.ppid, m.data.length]).sort()).toEqual([
        [46, 8],
        [47, 30_005],
      ]);
    },
  );

  // 1450 is VXLAN's MTU; before the fragment size was rounded to 4 bytes, an engine at that MTU
  // never sent a message larger than one packet (the fragment did not fit with its padding).
  it('relays messages of many packets with --sctp-mtu 1450 on a 1450-byte network', async () => {
    await startDaemonWithEcho((c) => {
      c.userspaceProxy.sctpMtu = 1450;
    }, 1450);
    const client = clientEngine(1450);
    const received: SctpMessage[] = [];
    const big = Buffer.alloc(20_001, 0x61);
    await until(async () => {
      try {
        const association = await connectThrough(client, CLIENT_IP);
        association.on('message', (m: SctpMessage) => received.push(m));
        association.send({ ppid: 46, data: big });
        return true;
      } catch {
        return false;
      }
    }, 'an association through the daemon');
    await until(() => received.length === 1, 'the echo of a 20 001-byte message');
    expect(received[0]?.data.length).toBe(5 + big.length);
    expect(received[0]?.data.subarray(5).equals(big)).toBe(true);
  });

  it('caps the associations of one peer address with --sctp-max-associations-per-address', async () => {
    await startDaemonWithEcho((c) => {
      c.userspaceProxy.sctpMaxAssociationsPerAddress = 1;
    });
    const client = clientEngine();
    await until(async () => {
      try {
        await connectThrough(client, CLIENT_IP);
        return true;
      } catch {
        return false;
      }
    }, 'the first association of CLIENT_IP');
    // A second one from the same address is refused; another address still gets in.
    await expect(connectThrough(client, CLIENT_IP)).rejects.toMatchObject({
      code: 'ERR_SCTP_CONNECT',
    });
    await expect(connectThrough(clientEngine(), OTHER_CLIENT_IP)).resolves.toBeDefined();
  });
});
