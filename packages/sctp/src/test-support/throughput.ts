/**
 * A quick throughput probe of the engine over UDP loopback, one direct association:
 * `npx tsx --conditions=@userspace-proxy/source packages/sctp/src/test-support/throughput.ts [seconds]`.
 * Prints messages/s at 100 B and MB/s at 64 KiB. Not part of the test suite.
 */
import { performance } from 'node:perf_hooks';
import { createUserspaceSctpEngine, type SctpAssociation } from '../index.js';
import { randomLoopback, randomPort } from './loopback.js';

async function measure(
  size: number,
  seconds: number,
): Promise<{ messages: number; bytes: number; elapsed: number }> {
  const server = createUserspaceSctpEngine();
  const client = createUserspaceSctpEngine();
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
  const a: SctpAssociation = await client.connect({
    address,
    port: 5000,
    encapsulationPort,
    localAddress: address,
  });
  const payload = Buffer.alloc(size, 1);
  const start = performance.now();
  const end = start + seconds * 1000;
  let sent = 0;
  while (performance.now() < end) {
    sent++;
    if (!a.send({ data: payload })) await new Promise<void>((r) => a.once('drain', r));
  }
  while (received < sent) await new Promise((r) => setImmediate(r));
  const elapsed = (performance.now() - start) / 1000;
  if (process.env.SCTP_VERBOSE) console.log(a.counters, (a as unknown as { cwnd: number }).cwnd);
  await client.close();
  await server.close();
  return { messages: received, bytes, elapsed };
}

const seconds = Number(process.argv[2] ?? 3);
const small = await measure(100, seconds);
console.log(
  `100 B: ${Math.round(small.messages / small.elapsed)} messages/s (${small.messages} in ${small.elapsed.toFixed(2)} s)`,
);
const big = await measure(64 * 1024, seconds);
console.log(
  `64 KiB: ${(big.bytes / big.elapsed / 1e6).toFixed(1)} MB/s (${big.messages} messages in ${big.elapsed.toFixed(2)} s)`,
);
