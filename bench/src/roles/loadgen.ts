import dgram from 'node:dgram';
import net from 'node:net';
import { processStats } from '../rpc.js';

/** Where a load goes. */
export interface Target {
  host: string;
  port: number;
}

const CHUNK = Buffer.alloc(256 * 1024, 0x61);
const REQUEST = Buffer.from('GET / HTTP/1.1\r\nHost: bench\r\n\r\n');

function connect(t: Target): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: t.host, port: t.port, noDelay: true }, () => {
      s.off('error', reject);
      resolve(s);
    });
    s.once('error', reject);
  });
}

/** Streams bytes for `durationMs` over `streams` connections into a sink; returns bits per second. */
async function tcpBulk(t: Target, streams: number, durationMs: number) {
  const sockets = await Promise.all(Array.from({ length: streams }, () => connect(t)));
  const start = performance.now();
  const end = start + durationMs;
  await Promise.all(
    sockets.map(
      (s) =>
        new Promise<void>((resolve) => {
          const pump = () => {
            while (performance.now() < end) {
              if (!s.write(CHUNK)) return void s.once('drain', pump);
            }
            resolve();
          };
          s.on('error', () => resolve());
          pump();
        }),
    ),
  );
  const seconds = (performance.now() - start) / 1000;
  let bytes = 0;
  for (const s of sockets) {
    bytes += s.bytesWritten - s.writableLength;
    s.destroy();
  }
  return { bytes, seconds, bitsPerSecond: (bytes * 8) / seconds };
}

/** One request per connection, `concurrency` at a time, for `durationMs`. */
async function connRate(t: Target, concurrency: number, durationMs: number) {
  const latencies: number[] = [];
  let errors = 0;
  const start = performance.now();
  const end = start + durationMs;
  const one = () =>
    new Promise<void>((resolve) => {
      const t0 = performance.now();
      const s = net.connect({ host: t.host, port: t.port, noDelay: true }, () => s.write(REQUEST));
      let got = 0;
      s.on('data', (d) => {
        got += d.length;
      });
      s.on('error', () => {
        errors++;
      });
      s.on('close', () => {
        if (got > 0) latencies.push(performance.now() - t0);
        else errors++;
        resolve();
      });
    });
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) await one();
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  latencies.sort((a, b) => a - b);
  const pct = (p: number) =>
    latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? 0;
  return {
    perSecond: latencies.length / seconds,
    count: latencies.length,
    p50Ms: pct(0.5),
    p99Ms: pct(0.99),
    errors,
  };
}

/** 64-byte ping-pong on one TCP connection or UDP socket; returns the median half round trip in µs. */
async function pingPong(t: Target, protocol: 'TCP' | 'UDP', durationMs: number) {
  const payload = Buffer.alloc(64, 0x62);
  const samples: number[] = [];
  const end = performance.now() + durationMs;
  if (protocol === 'TCP') {
    const s = await connect(t);
    await new Promise<void>((resolve) => {
      let got = 0;
      let t0 = 0;
      const send = () => {
        if (performance.now() > end) return resolve();
        got = 0;
        t0 = performance.now();
        s.write(payload);
      };
      s.on('data', (d) => {
        got += d.length;
        if (got >= payload.length) {
          samples.push(((performance.now() - t0) * 1000) / 2);
          send();
        }
      });
      send();
    });
    s.destroy();
  } else {
    const s = dgram.createSocket('udp4');
    await new Promise<void>((r) => s.connect(t.port, t.host, r));
    await new Promise<void>((resolve) => {
      let t0 = 0;
      let timer: NodeJS.Timeout | undefined;
      const send = () => {
        if (performance.now() > end) return resolve();
        t0 = performance.now();
        s.send(payload);
        clearTimeout(timer);
        timer = setTimeout(send, 200); // a lost datagram restarts the exchange
      };
      s.on('message', () => {
        samples.push(((performance.now() - t0) * 1000) / 2);
        send();
      });
      send();
    });
    s.close();
  }
  samples.sort((a, b) => a - b);
  return {
    halfRttUs: samples[Math.floor(samples.length / 2)] ?? 0,
    p99Us: samples[Math.floor(samples.length * 0.99)] ?? 0,
    samples: samples.length,
  };
}

/** Sends `size`-byte datagrams for `durationMs`, as fast as possible (rate 0) or at `rate` per second. */
async function udpFlood(t: Target, size: number, durationMs: number, rate: number) {
  const s = dgram.createSocket({ type: 'udp4', sendBufferSize: 4 << 20 });
  await new Promise<void>((r) => s.connect(t.port, t.host, r));
  const payload = Buffer.alloc(size, 0x63);
  let sent = 0;
  let inFlight = 0;
  const start = performance.now();
  const end = start + durationMs;
  await new Promise<void>((resolve) => {
    const done = () => {
      inFlight--;
      sent++;
    };
    const tick = () => {
      const now = performance.now();
      if (now >= end) return resolve();
      const due =
        rate > 0 ? Math.floor(((now - start) / 1000) * rate) - sent - inFlight : 256 - inFlight;
      for (let i = 0; i < due && inFlight < 1024; i++) {
        inFlight++;
        s.send(payload, done);
      }
      setImmediate(tick);
    };
    tick();
  });
  await new Promise((r) => setTimeout(r, 50));
  s.close();
  return { sent, seconds: (performance.now() - start - 50) / 1000 };
}

const idle: net.Socket[] = [];

/** Opens `count` connections to an echo port and leaves them idle. */
async function openIdle(t: Target, count: number) {
  for (let i = 0; i < count; i += 100) {
    const batch = Math.min(100, count - i);
    idle.push(...(await Promise.all(Array.from({ length: batch }, () => connect(t)))));
  }
  // One round trip on each, so every proxied connection is fully established end to end.
  await Promise.all(
    idle.map(
      (s) =>
        new Promise<void>((r) => {
          s.once('data', () => r());
          s.write('x');
        }),
    ),
  );
  return idle.length;
}

function closeIdle() {
  for (const s of idle.splice(0)) s.destroy();
}

/** The methods the orchestrator calls on the load-generator process. */
export const loadMethods = {
  tcpBulk,
  connRate,
  pingPong,
  udpFlood,
  openIdle,
  closeIdle,
  stats: processStats,
};
