/**
 * CPU the daemon's metrics spend per proxied connection: publishes a connectionOpen and a
 * connectionClose message (what core publishes for each connection) into a `ProxyMetrics` that is
 * subscribed to the diagnostics channels, and prints CPU-µs per connection (process.cpuUsage, min
 * and median of 5 rounds of 200 000). The builds to compare are checkouts with `pnpm build` done;
 * each is loaded from its dist/ by path, so an old and a new build run side by side in one session.
 *
 * usage: tsx bench/src/metrics-cost.ts [CHECKOUT_DIR]...   (default: this checkout)
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { pathToFileURL } from 'node:url';

interface MetricsModule {
  ProxyMetrics: new (options: {
    defaultMetrics: boolean;
  }) => { subscribe(): () => void; registry: { metrics(): Promise<string> } };
}
interface DiagnosticsModule {
  CHANNELS: { connectionOpen: string; connectionClose: string };
}

const ROUNDS = 5;
const PER_ROUND = 200_000;

async function measure(dir: string): Promise<void> {
  const at = (path: string) => pathToFileURL(`${dir}/${path}`).href;
  const { ProxyMetrics } = (await import(at('packages/server/dist/metrics.js'))) as MetricsModule;
  const { CHANNELS } = (await import(at('packages/core/dist/diagnostics.js'))) as DiagnosticsModule;
  const metrics = new ProxyMetrics({ defaultMetrics: false });
  const unsubscribe = metrics.subscribe();
  const open = diagnosticsChannel.channel(CHANNELS.connectionOpen);
  const close = diagnosticsChannel.channel(CHANNELS.connectionClose);
  const service = 'default/bench:tcp-8080';
  const run = (n: number) => {
    for (let i = 0; i < n; i++) {
      open.publish({
        service,
        protocol: 'TCP',
        client: '127.0.0.1:5000',
        endpoint: '127.0.0.2:80',
      });
      close.publish({
        service,
        protocol: 'TCP',
        endpoint: '127.0.0.2:80',
        bytesIn: 46,
        bytesOut: 60,
        durationMs: 0.4,
      });
    }
  };
  run(PER_ROUND);
  const perConnection: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const start = process.cpuUsage();
    run(PER_ROUND);
    const used = process.cpuUsage(start);
    perConnection.push((used.user + used.system) / PER_ROUND);
  }
  // A scrape, so that counts kept for it are part of what is measured.
  const start = process.cpuUsage();
  await metrics.registry.metrics();
  const scrape = process.cpuUsage(start);
  unsubscribe();
  perConnection.sort((a, b) => a - b);
  const median = perConnection[Math.floor(ROUNDS / 2)] as number;
  console.log(
    `${dir}: ${(perConnection[0] as number).toFixed(2)} µs min, ${median.toFixed(2)} µs median ` +
      `CPU per connection; one scrape ${((scrape.user + scrape.system) / 1000).toFixed(1)} ms`,
  );
}

const dirs = process.argv.slice(2);
for (const dir of dirs.length > 0 ? dirs : [process.cwd()]) await measure(dir);
