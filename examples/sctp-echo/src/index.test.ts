import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { echo, type RunningEcho, startEcho, USRSCTP_ECHO } from './index.js';

const running: RunningEcho[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) await r.stop();
});

const octet = () => 1 + Math.floor(Math.random() * 250);
const port = () => 20000 + Math.floor(Math.random() * 30000);

async function roundTrip(usrsctp: boolean): Promise<void> {
  const serviceIp = `127.11.${octet()}.${octet()}`;
  const encapsulationPort = port();
  const r = await startEcho({
    serviceIp,
    servicePort: 3868,
    backendIp: usrsctp ? '127.0.0.1' : `127.12.${octet()}.${octet()}`,
    encapsulationPort,
    usrsctp,
  });
  running.push(r);
  expect(r.backend).toBe(usrsctp ? 'usrsctp echo_server' : 'userspace engine');
  const a = await r.client.connect({
    address: serviceIp,
    port: 3868,
    encapsulationPort,
    localAddress: serviceIp,
    signal: AbortSignal.timeout(10_000),
  });
  const sent = Array.from({ length: 30 }, (_, i) => ({
    streamId: i % 3,
    ppid: 40 + i,
    data: Buffer.alloc(i === 7 ? 6000 : 20 + i, i),
  }));
  const got = await echo(a, sent);
  for (let s = 0; s < 3; s++) {
    const want = sent.filter((m) => m.streamId === s);
    const back = got.filter((m) => m.streamId === s);
    expect(back.map((m) => [m.ppid, m.data.length, m.data[0]])).toEqual(
      want.map((m) => [m.ppid, m.data.length, m.data[0]]),
    );
  }
  const closed = new Promise<string>((resolve) => a.once('close', (i) => resolve(i.reason)));
  a.shutdown();
  expect(await closed).toBe('shutdown');
}

describe('examples/sctp-echo', () => {
  it('echoes through the proxy to our engine, keeping stream, PPID and bytes', async () => {
    await roundTrip(false);
  });

  it.skipIf(!existsSync(USRSCTP_ECHO))(
    'echoes through the proxy to usrsctp echo_server',
    async () => {
      await roundTrip(true);
    },
  );

  it('runs the demo its README gives', async () => {
    const dir = fileURLToPath(new URL('..', import.meta.url));
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--conditions=@userspace-proxy/source', 'src/demo.ts'],
      {
        cwd: dir,
        env: {
          ...process.env,
          EXAMPLE_SERVICE_IP: `127.13.${octet()}.${octet()}`,
          EXAMPLE_BACKEND_IP: `127.14.${octet()}.${octet()}`,
          EXAMPLE_ENCAPSULATION_PORT: String(port()),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(out).toContain('echo on stream 1, PPID 47: "hello over stream 1"');
    expect(out).toContain('echo on stream 2, PPID 51: 5000 bytes');
    expect(out).toContain('association closed: shutdown');
    expect(out).toContain('stopped.');
    expect(code).toBe(0);
  }, 60_000);
});
