/**
 * A quick throughput probe of the engine over UDP loopback:
 * `npx tsx --conditions=@userspace-proxy/source packages/sctp/src/test-support/throughput.ts [seconds] [engine]`.
 * Prints messages/s at 100 B and MB/s at 64 KiB, for one direct association and through a relay
 * (client → listener | relayAssociations | connect → server, all in this process). Not a test.
 * `engine` is `userspace` (default) or one of the suite's foreign ones, `werift` or `npm-sctp`
 * (direct only: the figures docs/sctp.md gives per engine).
 */
import { performance } from 'node:perf_hooks';
import {
  createUserspaceSctpEngine,
  relayAssociations,
  type SctpAssociation,
  type SctpEngine,
} from '../index.js';
import { ForeignSctpEngine } from './engine-foreign.js';
import { npmSctpStack } from './engine-npm-sctp.js';
import { weriftStack } from './engine-werift.js';
import { randomLoopback, randomPort } from './loopback.js';

const which = process.argv[3] ?? 'userspace';
const makeEngine = (): SctpEngine =>
  which === 'werift'
    ? new ForeignSctpEngine(weriftStack)
    : which === 'npm-sctp'
      ? new ForeignSctpEngine(npmSctpStack)
      : createUserspaceSctpEngine();

interface Run {
  messages: number;
  bytes: number;
  elapsed: number;
}

async function measure(size: number, seconds: number, relayed: boolean): Promise<Run> {
  const engines: SctpEngine[] = [makeEngine(), makeEngine(), makeEngine()];
  const [server, client, proxy] = engines as [SctpEngine, SctpEngine, SctpEngine];
  const address = randomLoopback();
  const encapsulationPort = randomPort();
  const l = await server.listen({ address, port: 5000, encapsulationPort });
  let received = 0;
  let bytes = 0;
  l.on('association', (a) =>
    a.on('message', (m) => {
      received++;
      bytes += m.data.length;
    }),
  );
  let target = { address, encapsulationPort };
  if (relayed) {
    const proxyAddress = randomLoopback();
    const proxyPort = randomPort();
    const front = await proxy.listen({
      address: proxyAddress,
      port: 5000,
      encapsulationPort: proxyPort,
    });
    front.on('association', async (c) => {
      c.pause();
      const e = await proxy.connect({
        address,
        port: 5000,
        encapsulationPort,
        localAddress: proxyAddress,
      });
      relayAssociations(c, e);
      c.resume();
    });
    target = { address: proxyAddress, encapsulationPort: proxyPort };
  }
  const a: SctpAssociation = await client.connect({
    ...target,
    port: 5000,
    localAddress: target.address,
  });
  const payload = Buffer.alloc(size, 1);
  const start = performance.now();
  const end = start + seconds * 1000;
  let sent = 0;
  while (performance.now() < end) {
    sent++;
    if (!a.send({ data: payload })) await new Promise<void>((r) => a.once('drain', r));
  }
  const deadline = performance.now() + 20_000;
  while (received < sent && performance.now() < deadline) await new Promise((r) => setImmediate(r));
  const elapsed = (performance.now() - start) / 1000;
  for (const e of engines) await e.close();
  return { messages: received, bytes, elapsed };
}

const seconds = Number(process.argv[2] ?? 3);
for (const relayed of which === 'userspace' ? [false, true] : [false]) {
  const how = relayed ? 'through a relay' : 'direct';
  const small = await measure(100, seconds, relayed);
  console.log(
    `${how}, 100 B: ${Math.round(small.messages / small.elapsed)} messages/s (${small.messages} in ${small.elapsed.toFixed(2)} s)`,
  );
  const big = await measure(64 * 1024, seconds, relayed);
  console.log(
    `${how}, 64 KiB: ${(big.bytes / big.elapsed / 1e6).toFixed(1)} MB/s (${big.messages} messages in ${big.elapsed.toFixed(2)} s)`,
  );
}
