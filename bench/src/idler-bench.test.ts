import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { IDLER_SMOKE, runIdlerBench } from './idler-bench.js';
import { hasCC, NativeIdlerBackend } from './roles/idler-native-backend.js';

const cc = hasCC();
const noCc = cc ? '' : ' (skipped: no `cc` on this machine to build bench/native/idler-backend.c)';
const ms = () => Number(process.hrtime.bigint()) / 1e6;

/** Connects, sends one byte, and resolves once the backend has closed the connection. */
function oneByte(ip: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: ip, port }, () => socket.write('x'));
    socket.on('error', reject);
    socket.on('close', () => resolve());
    socket.resume();
  });
}

describe.skipIf(!cc)(`the idler bench's C backend${noCc}`, () => {
  let backend: NativeIdlerBackend | undefined;
  afterEach(() => backend?.stop());

  it('counts first bytes on every listener and times the last on the clock of process.hrtime', async () => {
    backend = new NativeIdlerBackend();
    const { ip, ports } = await backend.start(3, 2);
    expect(ports).toHaveLength(2);
    const arrived = backend.waitAll(20_000);
    const before = ms();
    await Promise.all([oneByte(ip, ports[0] ?? 0), oneByte(ip, ports[1] ?? 0)]);
    await oneByte(ip, ports[1] ?? 0);
    const after = ms();
    const end = await arrived;
    expect(end.firstBytes).toBe(3);
    // CLOCK_MONOTONIC in C and process.hrtime in Node are one clock: the last first byte was
    // taken while the third client was connected, so between the two readings here.
    expect(end.lastAt).toBeGreaterThanOrEqual(before);
    expect(end.lastAt).toBeLessThanOrEqual(after);
    expect(end.cpuMs).toBeGreaterThanOrEqual(0);
  });

  it('reports what has arrived when the wait times out', async () => {
    backend = new NativeIdlerBackend();
    const { ip, ports } = await backend.start(5, 1);
    await oneByte(ip, ports[0] ?? 0);
    const end = await backend.waitAll(0);
    expect(end.firstBytes).toBe(1);
  });

  it("is the bench's default backend, and every held client reaches it", async () => {
    const figures = await runIdlerBench(IDLER_SMOKE);
    expect(figures.backend).toBe('native');
    expect(figures.firstBytes).toBe(figures.held);
    expect(figures.lastFirstByteMs).toBeGreaterThan(0);
  }, 60_000);
});

describe('the idler bench with the Node backend', () => {
  it('is chosen by `backend: node` (--node-backend) and sees every held client', async () => {
    const figures = await runIdlerBench({ ...IDLER_SMOKE, backend: 'node' });
    expect(figures.backend).toBe('node');
    expect(figures.firstBytes).toBe(figures.held);
    expect(figures.lastFirstByteMs).toBeGreaterThan(0);
  }, 60_000);
});

describe("the idler bench's proxy flags and settled memory", () => {
  it('gives `nodeArgs` to the proxy alone and reads the memory again after `settleMs`', async () => {
    const figures = await runIdlerBench({
      ...IDLER_SMOKE,
      nodeArgs: ['--max-semi-space-size=1'],
      settleMs: 50,
    });
    expect(figures.nodeArgs).toEqual(['--max-semi-space-size=1']);
    expect(figures.firstBytes).toBe(figures.held);
    expect(figures.settledRssPerHeld).toBeTypeOf('number');
    expect(figures.settledYoungGrowthPerHeld).toBeTypeOf('number');
  }, 60_000);

  it('reads no settled memory without `settleMs`', async () => {
    const figures = await runIdlerBench(IDLER_SMOKE);
    expect(figures.nodeArgs).toEqual([]);
    expect(figures.settledRssPerHeld).toBeUndefined();
  }, 60_000);
});
